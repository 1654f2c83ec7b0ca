package operator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/operator"
)

// The audit log reads back every target's records, newest first, a page at a time.
func TestAuditLogNewestFirstInPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, _ := setup(t, nil)
	empty, err := op.AuditLog(ctx, 0, 0)
	require.NoError(t, err)
	require.Empty(t, empty)

	var tokens []string
	for i := range 3 {
		c := call(t, fmt.Sprintf("order-%d/refund", i), map[string]int{"amount": i})
		_, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) {
			return chargeResult{}, temporal.NewNonRetryableApplicationError("refused", "Rejected", nil)
		})
		require.ErrorContains(t, err, "refused")
		_, err = op.Rearm(ctx, c.Key.Token(), operator.Rearming{By: fmt.Sprintf("ops-%d", i), Reason: "fixed"})
		require.NoError(t, err)
		tokens = append(tokens, string(c.Key.Token()))
	}

	all, err := op.AuditLog(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, all, 3)
	for i, e := range all {
		require.Equal(t, tokens[2-i], e.Target, "record %d is not the newest-first one", i)
		require.Equal(t, fmt.Sprintf("ops-%d", 2-i), e.Actor)
		require.Equal(t, operator.AuditRearm, e.Action)
	}

	first, err := op.AuditLog(ctx, 2, 0)
	require.NoError(t, err)
	require.Len(t, first, 2)
	rest, err := op.AuditLog(ctx, 2, first[1].ID)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Equal(t, all[2], rest[0], "the second page does not continue the first")

	_, err = op.AuditLog(ctx, operator.AuditLogLimitMax+1, 0)
	require.ErrorIs(t, err, operator.ErrInvalidFilter)
}
