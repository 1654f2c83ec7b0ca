package activity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

func TestTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SameTokenAfterLease", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-10/charge", map[string]int{"amount": 100})
		c.Lease = 200 * time.Millisecond
		c.DownstreamDeduplicates = true
		var tokens []keys.Token
		receipttest.CrashAfterEffect(ctx, s, c, func(tok keys.Token) { tokens = append(tokens, tok) })

		// While the dead attempt's lease lasts, a retry is told to wait.
		_, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) {
			t.Error("called during the lease")
			return chargeResult{}, nil
		})
		require.ErrorAs(t, err, new(*activity.InProgressError))

		out, err := receipttest.DoUntilDone(ctx, s, c, func(ctx context.Context) (chargeResult, error) {
			tok, _ := keys.TokenFrom(ctx)
			tokens = append(tokens, tok)
			return chargeResult{ChargeID: "ch_1", Token: tok.String()}, nil
		})
		require.NoError(t, err)
		require.Len(t, tokens, 2)
		require.Equal(t, tokens[0], tokens[1], "the takeover called with a new token")
		require.Equal(t, c.Key.Token().String(), out.Token)
		state, fence := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateCompleted, state)
		require.Equal(t, int64(2), fence)
	})

	t.Run("NonDeduplicatingDownstreamFailsOutcomeUnknown", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-11/charge", map[string]int{"amount": 100})
		c.Lease = 100 * time.Millisecond
		var calls int
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) { calls++ })
		for range 2 { // the failure is recorded: a later attempt gets it too, and still no call
			_, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (chargeResult, error) {
				calls++
				return chargeResult{}, nil
			})
			var unknown *activity.OutcomeUnknownError
			require.ErrorAs(t, err, &unknown)
			require.Equal(t, c.Key, unknown.Key)
			temporaltest.RequireAppError(t, err, activity.ErrTypeOutcomeUnknown, false)
			require.Contains(t, err.Error(), "tempotent receipts resolve "+c.Key.Token().String(), "the message does not say what to do")
			require.NotContains(t, err.Error(), c.Key.ID, "the message carries the raw key, which may hold customer data")
		}
		require.Equal(t, 1, calls, "a non-deduplicating downstream was called again after an unknown outcome")
		state, _ := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateFailed, state)
	})

	t.Run("ReconcileFindsTheEarlierEffect", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-12/charge", map[string]int{"amount": 100})
		c.Lease = 100 * time.Millisecond
		c.DownstreamSettleTime = 100 * time.Millisecond // the downstream answers lookups at once
		ledger := map[keys.Token]chargeResult{}
		receipttest.CrashAfterEffect(ctx, s, c, func(tok keys.Token) { ledger[tok] = chargeResult{ChargeID: "ch_early", Token: tok.String()} })
		c.Reconcile = func(_ context.Context, tok keys.Token) (any, bool, error) {
			r, ok := ledger[tok]
			return r, ok, nil
		}
		out, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (chargeResult, error) {
			t.Error("called although reconcile found the effect")
			return chargeResult{}, nil
		})
		require.NoError(t, err)
		require.Equal(t, "ch_early", out.ChargeID)
	})

	t.Run("NotAppliedErrorIsNotAnUnknownOutcome", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-13/charge", map[string]int{"amount": 100})
		var calls int
		fn := func(context.Context) (int, error) {
			calls++
			if calls == 1 {
				return 0, activity.NotApplied(errors.New("connection refused"))
			}
			return 7, nil
		}
		_, err := activity.Do(ctx, s, c, fn)
		require.ErrorContains(t, err, "connection refused")
		out, err := activity.Do(ctx, s, c, fn)
		require.NoError(t, err, "a request that was never sent made the outcome unknown")
		require.Equal(t, 7, out)
	})

	t.Run("AmbiguousErrorIsAnUnknownOutcome", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-14/charge", map[string]int{"amount": 100})
		var calls int
		fn := func(context.Context) (int, error) {
			calls++
			return 0, errors.New("read: connection reset by peer")
		}
		_, err := activity.Do(ctx, s, c, fn)
		require.Error(t, err)
		_, err = activity.Do(ctx, s, c, fn)
		require.ErrorAs(t, err, new(*activity.OutcomeUnknownError))
		require.Equal(t, 1, calls)
	})

	t.Run("LateCompletionFromFencedOutAttemptCannotOverwrite", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-15/charge", map[string]int{"amount": 100})
		c.Lease = 100 * time.Millisecond
		c.DownstreamDeduplicates = true

		// The first attempt is paused past its lease (a stopped process, a long GC).
		resume, late := pausedAttempt(ctx, s, c, chargeResult{ChargeID: "ch_stale"}, nil)
		out, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (chargeResult, error) {
			return chargeResult{ChargeID: "ch_fresh"}, nil
		})
		require.NoError(t, err)
		require.Equal(t, "ch_fresh", out.ChargeID)

		resume()
		// The stale attempt's completion touches no row; it returns what the receipt records.
		stale := <-late
		require.NoError(t, stale.err)
		require.Equal(t, "ch_fresh", stale.out.ChargeID)
		replayed, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) {
			t.Error("called after completion")
			return chargeResult{}, nil
		})
		require.NoError(t, err)
		require.Equal(t, "ch_fresh", replayed.ChargeID)
		state, fence := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateCompleted, state)
		require.Equal(t, int64(2), fence)
	})

	// A stale attempt that fails retryably after it was taken over finds its release matching
	// nothing: it answers with what the receipt records, not with its own error.
	t.Run("LateRetryableErrorFromFencedOutAttemptGetsTheRecordedResult", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-19/charge", map[string]int{"amount": 100})
		c.Lease = 100 * time.Millisecond
		c.DownstreamDeduplicates = true
		resume, late := pausedAttempt(ctx, s, c, chargeResult{}, errors.New("connection reset by peer"))
		_, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (chargeResult, error) {
			return chargeResult{ChargeID: "ch_fresh"}, nil
		})
		require.NoError(t, err)
		resume()
		got := <-late
		require.NoError(t, got.err)
		require.Equal(t, "ch_fresh", got.out.ChargeID)
	})

	t.Run("LateCompletionBeforeTheNewAttemptFinishes", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-16/charge", map[string]int{"amount": 100})
		c.Lease = 100 * time.Millisecond
		c.DownstreamDeduplicates = true
		staleResume, staleDone := pausedAttempt(ctx, s, c, chargeResult{ChargeID: "ch_stale"}, nil)
		time.Sleep(150 * time.Millisecond)
		freshResume, freshDone := pausedAttempt(ctx, s, c, chargeResult{ChargeID: "ch_fresh"}, nil)
		staleResume()
		require.ErrorAs(t, (<-staleDone).err, new(*activity.FencedOutError))
		state, _ := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StatePending, state, "the stale attempt completed the receipt")
		freshResume()
		fresh := <-freshDone
		require.NoError(t, fresh.err)
		require.Equal(t, "ch_fresh", fresh.out.ChargeID)
	})
}

func TestMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mustNotCall := func(t *testing.T) func(context.Context) (int, error) {
		return func(context.Context) (int, error) {
			t.Error("called with a mismatched payload")
			return 0, nil
		}
	}
	requireMismatch := func(t *testing.T, err error) {
		t.Helper()
		var mismatch *activity.MismatchError
		require.ErrorAs(t, err, &mismatch)
		temporaltest.RequireAppError(t, err, activity.ErrTypePayloadMismatch, false)
		require.Contains(t, err.Error(), "use a new key")
	}
	fingerprint := func(t *testing.T, raw string) keys.Fingerprint {
		fp, err := keys.FingerprintJSON([]byte(raw))
		require.NoError(t, err)
		return fp
	}

	t.Run("EveryPath", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		other := fingerprint(t, `{"amount":999}`)

		completed := call(t, "completed", map[string]int{"amount": 1})
		_, err := activity.Do(ctx, s, completed, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)

		failed := call(t, "failed", map[string]int{"amount": 1})
		_, err = activity.Do(ctx, s, failed, func(context.Context) (int, error) {
			return 0, temporal.NewNonRetryableApplicationError("declined", "CardDeclined", nil)
		})
		require.Error(t, err)

		live := call(t, "live", map[string]int{"amount": 1})
		live.Lease = time.Minute
		receipttest.CrashAfterEffect(ctx, s, live, func(keys.Token) {})

		expired := call(t, "expired", map[string]int{"amount": 1})
		expired.Lease = time.Millisecond
		receipttest.CrashAfterEffect(ctx, s, expired, func(keys.Token) {})
		time.Sleep(10 * time.Millisecond)

		for _, c := range []activity.Call{completed, failed, live, expired} {
			c.Fingerprint = other
			c.DownstreamDeduplicates = true
			_, err := activity.Do(ctx, s, c, mustNotCall(t))
			requireMismatch(t, err)
		}
	})

	t.Run("ReorderedJSONIsTheSameRequest", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-20/charge", nil)
		c.Fingerprint = fingerprint(t, `{"amount": 100, "card": {"last4": "4242", "exp": "12/30"}, "currency": "eur"}`)
		out, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return 42, nil })
		require.NoError(t, err)
		c.Fingerprint = fingerprint(t, `{"currency":"eur","card":{"exp":"12/30","last4":"4242"},"amount":100.0}`)
		again, err := activity.Do(ctx, s, c, mustNotCall(t))
		require.NoError(t, err)
		require.Equal(t, out, again)
	})

	t.Run("AnyRealChangeIsAMismatch", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		base := `{"amount":100,"card":{"last4":"4242"},"note":"café"}`
		c := call(t, "order-21/charge", nil)
		c.Fingerprint = fingerprint(t, base)
		_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
		for name, changed := range map[string]string{
			"Amount":         `{"amount":101,"card":{"last4":"4242"},"note":"café"}`,
			"NestedField":    `{"amount":100,"card":{"last4":"4243"},"note":"café"}`,
			"StringBytes":    `{"amount":100,"card":{"last4":"4242"},"note":"cafe\u0301"}`, // NFD: same glyph, other bytes
			"MissingField":   `{"amount":100,"card":{"last4":"4242"}}`,
			"AmountAsString": `{"amount":"100","card":{"last4":"4242"},"note":"café"}`,
		} {
			t.Run(name, func(t *testing.T) {
				c := c
				c.Fingerprint = fingerprint(t, changed)
				_, err := activity.Do(ctx, s, c, mustNotCall(t))
				requireMismatch(t, err)
			})
		}
	})
}
