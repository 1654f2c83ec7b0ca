package operator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// A refund that failed for good replays its failure to every later attempt. Once an operator
// fixed the cause and re-armed the receipt, the next attempt calls the refund again under the
// same token, and records what it does this time.
func TestRearmRunsAFailedIntentAgainUnderTheSameToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, _ := setup(t, nil)
	c := call(t, "order-1/refund", map[string]int{"amount": 100})
	c.DownstreamDeduplicates = true
	var tokens []keys.Token
	refund := func(fail bool) func(context.Context) (chargeResult, error) {
		return func(ctx context.Context) (chargeResult, error) {
			tok, _ := keys.TokenFrom(ctx)
			tokens = append(tokens, tok)
			if fail {
				return chargeResult{}, temporal.NewNonRetryableApplicationError("the provider refuses refunds on this account", "Rejected", nil)
			}
			return chargeResult{ChargeID: "re_1"}, nil
		}
	}
	_, err := activity.Do(ctx, s, c, refund(true))
	require.ErrorContains(t, err, "refuses refunds")
	_, err = activity.Do(ctx, s, c, refund(false))
	require.ErrorContains(t, err, "refuses refunds", "the failure was not replayed")
	require.Len(t, tokens, 1)
	before, err := op.Receipt(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Equal(t, operator.StatusFailed, before.Status)

	_, err = op.Rearm(ctx, c.Key.Token(), operator.Rearming{By: "ops@example.com"})
	require.ErrorContains(t, err, "Rearming.Reason", "a re-arm without why was taken")
	_, err = op.Rearm(ctx, "no-such-token", operator.Rearming{By: "ops", Reason: "typo"})
	require.ErrorIs(t, err, operator.ErrNoReceipt)

	r, err := op.Rearm(ctx, c.Key.Token(), operator.Rearming{By: "ops@example.com", Reason: "INC-9: refunds enabled on the account again"})
	require.NoError(t, err)
	require.Equal(t, operator.StatePending, r.State)
	require.Equal(t, operator.StatusLeaseEnded, r.Status)
	require.Empty(t, r.ErrorType)
	require.Equal(t, "ops@example.com", r.ResolvedBy)
	require.Contains(t, r.Resolution, "INC-9")
	require.True(t, r.Rearmed())
	require.NotNil(t, r.ResolvedAt)

	out, err := activity.Do(ctx, s, c, refund(false))
	require.NoError(t, err, "the re-armed refund did not run again")
	require.Equal(t, "re_1", out.ChargeID)
	require.Equal(t, []keys.Token{c.Key.Token(), c.Key.Token()}, tokens, "the refund ran again under another token")
	after, err := op.Receipt(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Equal(t, operator.StatusSucceeded, after.Status, "the new outcome was not recorded")
	require.Equal(t, before.Fence+1, after.Fence, "the run after the re-arm did not take the receipt over under a new fence")

	out, err = activity.Do(ctx, s, c, refund(false))
	require.NoError(t, err)
	require.Equal(t, "re_1", out.ChargeID)
	require.Len(t, tokens, 2, "the recorded new outcome was not replayed")

	_, err = op.Rearm(ctx, c.Key.Token(), operator.Rearming{By: "ops", Reason: "again"})
	require.ErrorIs(t, err, operator.ErrNotFailed, "a succeeded receipt was re-armed")
	require.ErrorContains(t, err, "succeeded")

	entries, err := op.Audit(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Len(t, entries, 1, "the refused re-arm was recorded, or the re-arm was not")
	e := entries[0]
	require.Equal(t, operator.AuditRearm, e.Action)
	require.Equal(t, "ops@example.com", e.Actor)
	require.Equal(t, string(c.Key.Token()), e.Target)
	require.Equal(t, "INC-9: refunds enabled on the account again", e.Reason)
	require.WithinDuration(t, time.Now(), e.At, time.Minute)
	var detail map[string]any
	require.NoError(t, json.Unmarshal(e.Detail, &detail))
	require.Equal(t, "Rejected", detail["error_type"], "the audit does not keep the failure the re-arm cleared")
	require.Contains(t, detail["error_message"], "refuses refunds")
}

func TestRearmRefusesAllButAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, _ := setup(t, nil)

	t.Run("Pending", func(t *testing.T) {
		c := call(t, "order-2/refund", map[string]int{"amount": 100})
		c.Lease = time.Hour
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		_, err := op.Rearm(ctx, c.Key.Token(), operator.Rearming{By: "ops", Reason: "r"})
		require.ErrorIs(t, err, operator.ErrNotFailed, "a running receipt was re-armed")
		require.ErrorContains(t, err, operator.StatusRunning)
	})

	t.Run("OutcomeUnknownIsResolvedInstead", func(t *testing.T) {
		c := call(t, "order-3/charge", map[string]int{"amount": 100})
		c.Lease = 20 * time.Millisecond
		unknownOutcome(t, ctx, s, c)
		_, err := op.Rearm(ctx, c.Key.Token(), operator.Rearming{By: "ops", Reason: "r"})
		require.ErrorIs(t, err, operator.ErrNotFailed, "an unknown outcome was re-armed: the effect may have happened")
		require.ErrorContains(t, err, "resolve")

		_, err = op.Resolve(ctx, c.Key.Token(), operator.Resolution{By: "ops@example.com", Reason: "INC-10: no charge at the provider"})
		require.NoError(t, err)
		entries, err := op.Audit(ctx, c.Key.Token())
		require.NoError(t, err)
		require.Len(t, entries, 1, "the resolution was not recorded in the audit log")
		require.Equal(t, operator.AuditResolve, entries[0].Action)
		require.Equal(t, "ops@example.com", entries[0].Actor)
		require.JSONEq(t, `{"applied": false}`, string(entries[0].Detail))
	})
}
