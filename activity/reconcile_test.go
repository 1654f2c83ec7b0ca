package activity_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// effectPossible reads k's receipt's effect_possible flag.
func effectPossible(t *testing.T, schema string, k keys.Key) bool {
	t.Helper()
	var possible bool
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT effect_possible FROM "+schema+".receipts WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
		k.Namespace, k.Tenant, k.Operation, k.ID).Scan(&possible))
	return possible
}

// endLease moves k's lease into the past by ago, as a database clock moved on would.
func endLease(t *testing.T, schema string, k keys.Key, ago time.Duration) {
	t.Helper()
	require.NoError(t, moveLeaseEnd(pgtest.Pool(t), schema, k, ago))
}

// moveLeaseEnd is endLease for a caller off the test's goroutine, where it must not fail the
// test itself.
func moveLeaseEnd(db *pgxpool.Pool, schema string, k keys.Key, ago time.Duration) error {
	_, err := db.Exec(context.Background(),
		"UPDATE "+schema+".receipts SET lease_expires_at = now() - $5::bigint * interval '1 microsecond' WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
		k.Namespace, k.Tenant, k.Operation, k.ID, ago.Microseconds())
	if err != nil {
		return fmt.Errorf("end the lease of %s: %w", k.ID, err)
	}
	return nil
}

// A reconcile that fails — whatever the error — must not settle the intent: not as "the call
// was not sent" (a NotApplied error from a lookup that could not connect), and not as the
// intent's own final failure (a non-retryable 401). The receipt keeps saying an effect may have
// happened, the attempt fails retryably, and the next attempt asks again.
func TestReconcileErrorsNeverSettleTheIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, lookupErr := range map[string]error{
		"LookupNotSent":        activity.NotApplied(errors.New("dial tcp 127.0.0.1:9: connection refused")),
		"LookupRefused":        temporal.NewNonRetryableApplicationError("401 Unauthorized", "tempotent.DownstreamRejected", nil),
		"LookupAmbiguousError": errors.New("read: connection reset by peer"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, schema := setup(t, nil)
			c := call(t, "order-1/charge", map[string]int{"amount": 100})
			c.Lease = 50 * time.Millisecond
			c.DownstreamSettleTime = time.Millisecond
			var charges atomic.Int32 // a downstream that does not deduplicate: every call charges
			ledger := map[keys.Token]int{}
			receipttest.CrashAfterEffect(ctx, s, c, func(tok keys.Token) { charges.Add(1); ledger[tok] = 42 })

			lookupFails := true
			c.Reconcile = func(_ context.Context, tok keys.Token) (any, bool, error) {
				if lookupFails {
					return nil, false, lookupErr
				}
				v, ok := ledger[tok]
				return v, ok, nil
			}
			charge := func(context.Context) (int, error) { charges.Add(1); return 7, nil }

			for range 3 {
				_, err := receipttest.DoUntilDone(ctx, s, c, charge)
				require.ErrorAs(t, err, new(*activity.ReconcileError))
				// Retryable: a failed reconcile must not end the intent.
				temporaltest.RequireAppError(t, err, activity.ErrTypeReconcileFailed, true)
				state, _ := receiptState(t, schema, c.Key)
				require.Equal(t, operator.StatePending, state)
				require.True(t, effectPossible(t, schema, c.Key), "a failed reconcile erased that an effect may have happened")
			}

			lookupFails = false
			got, err := receipttest.DoUntilDone(ctx, s, c, charge)
			require.NoError(t, err)
			require.Equal(t, 42, got, "the reconciled result is the earlier attempt's")
			require.Equal(t, int32(1), charges.Load(), "the downstream was called again")
		})
	}
}

// Reconcile's "not found" is trusted only once the downstream's settle time has passed since the
// last attempt ended: before that, the earlier request may still be on its way.
func TestReconcileWaitsForTheSettleTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	c := call(t, "order-2/charge", map[string]int{"amount": 100})
	c.Lease = time.Hour
	c.DownstreamSettleTime = time.Hour
	var asked, charged int
	receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
	c.Reconcile = func(context.Context, keys.Token) (any, bool, error) { asked++; return nil, false, nil }
	charge := func(context.Context) (int, error) { charged++; return 7, nil }

	endLease(t, schema, c.Key, time.Minute) // ended a minute ago; the downstream may take an hour
	_, err := activity.Do(ctx, s, c, charge)
	var inProgress *activity.InProgressError
	require.ErrorAs(t, err, &inProgress)
	require.Zero(t, asked, "reconcile was asked before the downstream settled")
	require.Zero(t, charged)

	endLease(t, schema, c.Key, time.Hour+time.Minute)
	got, err := activity.Do(ctx, s, c, charge)
	require.NoError(t, err)
	require.Equal(t, 7, got)
	require.Equal(t, 1, asked)
	require.Equal(t, 1, charged, "not found, once settled, is final: the function runs")
}

// A reconcile that fails sent nothing: the settle time still counts from the end of the attempt
// that may have sent, so the next attempt asks again at once instead of waiting it out anew (a
// lookup outage would otherwise cost a settle time per failed lookup, and use up the retries).
func TestFailedReconcileDoesNotRestartTheSettleTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	c := call(t, "order-3/charge", map[string]int{"amount": 100})
	c.Lease = time.Hour
	c.DownstreamSettleTime = time.Hour
	receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
	lookupDown := true
	var asked int
	c.Reconcile = func(context.Context, keys.Token) (any, bool, error) {
		asked++
		if lookupDown {
			return nil, false, errors.New("lookup: connection refused")
		}
		return 42, true, nil
	}
	charge := func(context.Context) (int, error) {
		t.Error("charged although the charge may have happened")
		return 0, nil
	}

	endLease(t, schema, c.Key, time.Hour+time.Minute) // settled
	_, err := activity.Do(ctx, s, c, charge)
	require.ErrorAs(t, err, new(*activity.ReconcileError))
	lookupDown = false
	got, err := activity.Do(ctx, s, c, charge)
	require.NoError(t, err, "the failed lookup made the next attempt wait the settle time again")
	require.Equal(t, 42, got)
	require.Equal(t, 2, asked)
}

// A NotApplied error after a takeover says that this attempt's call was not sent; it must not
// erase that an earlier attempt's may have been.
func TestNotAppliedAfterTakeoverKeepsTheEarlierUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	c := call(t, "order-3/charge", map[string]int{"amount": 100})
	c.Lease = 50 * time.Millisecond
	c.DownstreamDeduplicates = true
	receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
	_, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (int, error) {
		return 0, activity.NotApplied(errors.New("connection refused"))
	})
	require.ErrorContains(t, err, "connection refused")
	require.True(t, effectPossible(t, schema, c.Key), "the earlier attempt's possible effect was forgotten")
}

// With a deduplicating downstream, a takeover may send the token again only while the
// downstream still remembers it: past its key memory, the takeover reconciles or fails
// OutcomeUnknown.
func TestTakeoverPastTheDownstreamKeyMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	age := func(t *testing.T, schema string, k keys.Key, d time.Duration) {
		t.Helper()
		_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+schema+".receipts SET created_at = now() - $2::bigint * interval '1 microsecond' WHERE id = $1",
			k.ID, d.Microseconds())
		require.NoError(t, err)
	}

	t.Run("WithoutReconcile", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-4/charge", map[string]int{"amount": 100})
		c.Lease = 50 * time.Millisecond
		c.DownstreamDeduplicates = true
		var calls int
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) { calls++ })
		age(t, schema, c.Key, 25*time.Hour)
		_, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (int, error) { calls++; return 7, nil })
		require.ErrorAs(t, err, new(*activity.OutcomeUnknownError))
		require.ErrorContains(t, err, "key memory")
		require.Equal(t, 1, calls, "a token older than the downstream's key memory was sent again")
	})

	t.Run("WithReconcile", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-5/charge", map[string]int{"amount": 100})
		c.Lease = 50 * time.Millisecond
		c.DownstreamDeduplicates = true
		c.DownstreamKeyMemory = time.Hour
		c.DownstreamSettleTime = time.Millisecond
		ledger := map[keys.Token]int{}
		receipttest.CrashAfterEffect(ctx, s, c, func(tok keys.Token) { ledger[tok] = 42 })
		age(t, schema, c.Key, 2*time.Hour)
		c.Reconcile = func(_ context.Context, tok keys.Token) (any, bool, error) {
			v, ok := ledger[tok]
			return v, ok, nil
		}
		got, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (int, error) {
			t.Error("called again past the key memory although reconcile found the effect")
			return 0, nil
		})
		require.NoError(t, err)
		require.Equal(t, 42, got)
	})

	// Past the key memory the token cannot be sent, so the downstream is asked; not before the
	// settle time has passed since the last attempt ended, or it could say "not found" about a
	// request it is still applying.
	t.Run("AsksOnlyAfterTheSettleTime", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-7/charge", map[string]int{"amount": 100})
		c.Lease = 50 * time.Millisecond
		c.DownstreamDeduplicates = true
		c.DownstreamKeyMemory = time.Hour
		c.DownstreamSettleTime = time.Hour
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		age(t, schema, c.Key, 2*time.Hour)
		_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+schema+".receipts SET lease_expires_at = now() WHERE id = $1", c.Key.ID)
		require.NoError(t, err) // the crashed attempt's lease ends now
		asked := 0
		c.Reconcile = func(context.Context, keys.Token) (any, bool, error) { asked++; return nil, false, nil }
		_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) {
			t.Error("called past the key memory")
			return 0, nil
		})
		require.ErrorAs(t, err, new(*activity.InProgressError))
		require.Zero(t, asked, "the downstream was asked before the settle time had passed")
	})

	t.Run("WithinTheKeyMemory", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-6/charge", map[string]int{"amount": 100})
		c.Lease = 50 * time.Millisecond
		c.DownstreamDeduplicates = true
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		age(t, schema, c.Key, 23*time.Hour)
		got, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (int, error) { return 7, nil })
		require.NoError(t, err)
		require.Equal(t, 7, got, "a takeover within the key memory sends the token again")
	})
}
