package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("AppliedReplaysTheRecordedResult", func(t *testing.T) {
		t.Parallel()
		s, op, _ := setup(t, nil)
		c := call(t, "order-1/charge", map[string]int{"amount": 100})
		c.Lease = 20 * time.Millisecond
		calls := unknownOutcome(t, ctx, s, c)

		page, err := op.Receipts(ctx, operator.Filter{State: operator.FilterUnknown})
		require.NoError(t, err)
		require.Len(t, page.Receipts, 1)
		r := page.Receipts[0]
		require.Equal(t, c.Key.Token(), r.Token)
		require.Equal(t, operator.StatusUnknown, r.Status)
		require.True(t, r.Unresolved)
		require.Equal(t, 2, r.Attempts)

		_, err = op.Resolve(ctx, r.Token, operator.Resolution{Applied: true, Result: chargeResult{ChargeID: "ch_1"}})
		require.ErrorContains(t, err, "Resolution.By", "a resolution without who and why was taken")
		_, err = op.Resolve(ctx, r.Token, operator.Resolution{Result: chargeResult{ChargeID: "ch_1"}, By: "ops", Reason: "forgot Applied"})
		require.ErrorContains(t, err, "Applied is false", "a result without Applied was taken as \"not applied\"")
		_, err = op.Resolve(ctx, r.Token, operator.Resolution{Applied: true, By: "ops", Reason: "no result"})
		require.ErrorContains(t, err, "Applied needs Resolution.Result", "an applied resolution without a result was taken")

		got, err := op.Resolve(ctx, r.Token, operator.Resolution{Applied: true, Result: chargeResult{ChargeID: "ch_1"},
			By: "ops@example.com", Reason: "INC-7: the provider's dashboard shows ch_1"})
		require.NoError(t, err)
		require.Equal(t, operator.StatusSucceeded, got.Status)
		require.False(t, got.Unresolved)
		require.Equal(t, "ops@example.com", got.ResolvedBy)
		require.Equal(t, "INC-7: the provider's dashboard shows ch_1", got.Resolution)
		require.NotNil(t, got.ResolvedAt)
		require.JSONEq(t, `{"charge_id":"ch_1","token":""}`, got.ResultText())

		out, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) { *calls++; return chargeResult{}, nil })
		require.NoError(t, err)
		require.Equal(t, chargeResult{ChargeID: "ch_1"}, out, "the next attempt did not replay the resolved result")
		require.Equal(t, 1, *calls, "the downstream was called again after the outcome was resolved as applied")

		_, err = op.Resolve(ctx, r.Token, operator.Resolution{By: "ops", Reason: "again"})
		require.ErrorIs(t, err, operator.ErrNotUnresolved, "a recorded outcome was overwritten by hand")
		require.ErrorContains(t, err, "succeeded")
	})

	t.Run("NotAppliedRunsAgainUnderTheSameToken", func(t *testing.T) {
		t.Parallel()
		s, op, _ := setup(t, nil)
		c := call(t, "order-2/charge", map[string]int{"amount": 100})
		c.Lease = 20 * time.Millisecond
		calls := unknownOutcome(t, ctx, s, c)

		_, err := op.Resolve(ctx, c.Key.Token(), operator.Resolution{By: "ops", Reason: "INC-8: no charge at the provider"})
		require.NoError(t, err)
		var sent keys.Token
		out, err := activity.Do(ctx, s, c, func(ctx context.Context) (chargeResult, error) {
			*calls++
			sent, _ = keys.TokenFrom(ctx)
			return chargeResult{ChargeID: "ch_2"}, nil
		})
		require.NoError(t, err)
		require.Equal(t, chargeResult{ChargeID: "ch_2"}, out)
		require.Equal(t, 2, *calls, "the next attempt did not call after the outcome was resolved as not applied")
		require.Equal(t, c.Key.Token(), sent)
		r, err := op.Receipt(ctx, c.Key.Token())
		require.NoError(t, err)
		require.Equal(t, operator.StatusSucceeded, r.Status)
		require.Equal(t, "ops", r.ResolvedBy, "who resolved it was forgotten when the next attempt completed")
	})

	// A receipt whose lease ended after a possible effect is unresolved too: the activity may
	// have been given up on. Resolving it takes it from the attempt that still holds the ended
	// lease: that attempt's late completion writes nothing, and it returns what was resolved.
	t.Run("LeaseEndedTakesTheReceiptFromItsStaleAttempt", func(t *testing.T) {
		t.Parallel()
		s, op, _ := setup(t, nil)
		c := call(t, "order-3/charge", map[string]int{"amount": 100})
		c.Lease = 50 * time.Millisecond
		resolved := make(chan struct{})
		stale := make(chan error, 1)
		go func() {
			out, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) {
				<-resolved
				return chargeResult{ChargeID: "ch_stale"}, nil
			})
			if err == nil && out.ChargeID != "ch_resolved" {
				err = fmt.Errorf("the stale attempt returned %+v, not the resolved result", out)
			}
			stale <- err
		}()
		require.Eventually(t, func() bool {
			page, err := op.Receipts(ctx, operator.Filter{State: operator.FilterLeaseEnded})
			return err == nil && len(page.Receipts) == 1
		}, 5*time.Second, 10*time.Millisecond)
		r, err := op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: json.RawMessage(`{"charge_id":"ch_resolved"}`),
			By: "ops", Reason: "dashboard"})
		require.NoError(t, err)
		require.Equal(t, operator.StatusSucceeded, r.Status)
		close(resolved)
		require.NoError(t, <-stale)
		r, err = op.Receipt(ctx, c.Key.Token())
		require.NoError(t, err)
		require.JSONEq(t, `{"charge_id":"ch_resolved"}`, r.ResultText(), "the stale attempt overwrote the resolution")
	})

	// "Not applied" ends the stale holder's claim too: its late completion matches nothing, and
	// the next attempt calls again under the same token. (Resolving so while an attempt may still
	// be sending is the operator's error; the Resolution doc says so.)
	t.Run("NotAppliedFencesTheStaleAttempt", func(t *testing.T) {
		t.Parallel()
		s, op, _ := setup(t, nil)
		c := call(t, "order-5/charge", map[string]int{"amount": 100})
		c.Lease = 50 * time.Millisecond
		c.DownstreamDeduplicates = true
		resolved, stale := make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) {
				<-resolved
				return chargeResult{ChargeID: "ch_stale"}, nil
			})
			stale <- err
		}()
		require.Eventually(t, func() bool {
			page, err := op.Receipts(ctx, operator.Filter{State: operator.FilterLeaseEnded})
			return err == nil && len(page.Receipts) == 1
		}, 5*time.Second, 10*time.Millisecond)
		_, err := op.Resolve(ctx, c.Key.Token(), operator.Resolution{By: "ops", Reason: "no charge found"})
		require.NoError(t, err)
		close(resolved)
		require.ErrorAs(t, <-stale, new(*activity.FencedOutError), "the stale attempt wrote over the resolution")
		out, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) { return chargeResult{ChargeID: "ch_next"}, nil })
		require.NoError(t, err)
		require.Equal(t, "ch_next", out.ChargeID)
	})

	t.Run("RefusesARunningOrMissingReceipt", func(t *testing.T) {
		t.Parallel()
		s, op, _ := setup(t, nil)
		c := call(t, "order-4/charge", map[string]int{"amount": 100})
		c.Lease = time.Hour
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		_, err := op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: 1, By: "ops", Reason: "guess"})
		require.ErrorIs(t, err, operator.ErrNotUnresolved, "a running attempt's receipt was resolved under it")
		require.ErrorContains(t, err, operator.StatusRunning)

		_, err = op.Resolve(ctx, "no-such-token", operator.Resolution{By: "ops", Reason: "typo"})
		require.ErrorIs(t, err, operator.ErrNoReceipt)
	})
}

// An operator resolves a receipt at the moment the next attempt takes it over. Exactly one of
// them wins: a resolution that was taken is what every caller gets, and the takeover's call, if
// it ran, is what the receipt records when the resolution was refused. Never both.
func TestResolveRacesATakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, _ := setup(t, nil)
	resolved := 0
	for i := range 20 {
		c := call(t, fmt.Sprintf("race-%d/charge", i), map[string]int{"amount": 100})
		c.Lease = 10 * time.Millisecond
		c.DownstreamDeduplicates = true
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		time.Sleep(15 * time.Millisecond)

		type answer struct {
			out chargeResult
			err error
		}
		took := make(chan answer, 1)
		go func() {
			out, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (chargeResult, error) {
				return chargeResult{ChargeID: "ch_takeover"}, nil
			})
			took <- answer{out, err}
		}()
		_, resolveErr := op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true,
			Result: chargeResult{ChargeID: "ch_resolved"}, By: "ops", Reason: "race"})
		a := <-took
		require.NoError(t, a.err)
		r, err := op.Receipt(ctx, c.Key.Token())
		require.NoError(t, err)
		if resolveErr == nil {
			resolved++
			require.Equal(t, "ch_resolved", a.out.ChargeID, "round %d: the takeover's result was returned although the resolution was taken", i)
			require.JSONEq(t, `{"charge_id":"ch_resolved","token":""}`, r.ResultText(), "round %d: the resolution was overwritten", i)
		} else {
			require.ErrorIs(t, resolveErr, operator.ErrNotUnresolved, "round %d", i)
			require.Equal(t, "ch_takeover", a.out.ChargeID, "round %d", i)
			require.Nil(t, r.ResolvedAt, "round %d: a refused resolution was recorded", i)
		}
	}
	t.Logf("the resolution won %d of 20 rounds, the takeover the others", resolved)
}

// An operator's result is a stored result like any other: Resolve seals it with Config.Codecs,
// so it is not cleartext at rest, and the next attempt replays it decoded.
func TestResolveSealsTheResultWithCodecs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, schema := setup(t, &activity.Config{Codecs: []converter.PayloadCodec{receipttest.Rot13Codec{}}})
	c := call(t, "order-1/charge", map[string]int{"amount": 100})
	c.Lease = 20 * time.Millisecond
	calls := unknownOutcome(t, ctx, s, c)

	const secret = "ch_secret_resolved"
	got, err := op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: chargeResult{ChargeID: secret},
		By: "ops", Reason: "the provider shows the charge"})
	require.NoError(t, err)
	require.JSONEq(t, `{"charge_id":"`+secret+`","token":""}`, got.ResultText(), "Receipt did not open the resolved result")

	var stored []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT result FROM "+schema+".receipts").Scan(&stored))
	require.NotEmpty(t, stored)
	require.False(t, bytes.Contains(stored, []byte(secret)), "the resolved result is stored in cleartext, not sealed by Config.Codecs")

	out, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) { *calls++; return chargeResult{}, nil })
	require.NoError(t, err)
	require.Equal(t, chargeResult{ChargeID: secret}, out, "the next attempt did not replay the resolved result")
	require.Equal(t, 1, *calls)
}
