package activity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/operator"
)

// The deprecated operator API on Store forwards to operator: 1.0 code that lists, reads, resolves,
// re-arms, counts, purges and partitions through the store still works, on the store's schema,
// and matches the same errors.
func TestDeprecatedOperatorAPIForwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setupPlain(t, &activity.Config{MetricsHandler: client.MetricsNopHandler})
	c := call(t, "order-1", map[string]int{"amount": 1})
	_, err := activity.Do(ctx, s, c, func(context.Context) (string, error) { return "ch_1", nil })
	require.NoError(t, err)

	var page activity.Page
	page, err = s.Receipts(ctx, activity.Filter{State: activity.StateCompleted})
	require.NoError(t, err)
	require.Len(t, page.Receipts, 1)
	var r activity.Receipt
	r, err = s.Receipt(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Equal(t, activity.StatusSucceeded, r.Status)
	require.Equal(t, `"ch_1"`, r.ResultText())
	_, err = s.Resolve(ctx, c.Key.Token(), activity.Resolution{By: "ops", Reason: "test"})
	require.ErrorIs(t, err, activity.ErrNotUnresolved)
	require.ErrorIs(t, err, operator.ErrNotUnresolved)
	_, err = s.Rearm(ctx, c.Key.Token(), activity.Rearming{By: "ops", Reason: "test"})
	require.ErrorIs(t, err, activity.ErrNotFailed)
	_, err = s.Receipt(ctx, "no-such-token")
	require.ErrorIs(t, err, activity.ErrNoReceipt)
	_, err = s.Receipts(ctx, activity.Filter{State: "stuck"})
	require.ErrorIs(t, err, activity.ErrInvalidFilter)
	var audit []activity.AuditEntry
	audit, err = s.Audit(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Empty(t, audit)

	var st activity.Stats
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Total.Succeeded)
	var counts activity.Counts
	counts, err = s.CountSince(ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.Completed)
	n, err := s.Unresolved(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.Purge(ctx, activity.PurgeBatchDefault)
	require.NoError(t, err)
	require.Zero(t, n, "a receipt within its retention was purged")

	on, err := s.Partitioned(ctx)
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, s.Partition(ctx))
	on, err = s.Partitioned(ctx)
	require.NoError(t, err)
	require.True(t, on)
	require.Equal(t, operator.RetentionDefault, activity.RetentionDefault)
}
