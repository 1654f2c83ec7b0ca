package activity

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/operator"
)

// The deprecated operator API on Store forwards to operator: 1.0 code that lists, reads, resolves,
// re-arms, counts, purges and partitions through the store still works, on the store's schema,
// and matches the same errors.
func TestDeprecatedOperatorAPIForwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{MetricsHandler: client.MetricsNopHandler})
	c := reserveCall(t, "order-1", true)
	_, err := Do(ctx, s, c, func(context.Context) (string, error) { return "ch_1", nil })
	require.NoError(t, err)

	var page Page
	page, err = s.Receipts(ctx, Filter{State: StateCompleted})
	require.NoError(t, err)
	require.Len(t, page.Receipts, 1)
	var r Receipt
	r, err = s.Receipt(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, r.Status)
	require.Equal(t, `"ch_1"`, r.ResultText())
	_, err = s.Resolve(ctx, c.Key.Token(), Resolution{By: "ops", Reason: "test"})
	require.ErrorIs(t, err, ErrNotUnresolved)
	require.ErrorIs(t, err, operator.ErrNotUnresolved)
	_, err = s.Rearm(ctx, c.Key.Token(), Rearming{By: "ops", Reason: "test"})
	require.ErrorIs(t, err, ErrNotFailed)
	_, err = s.Receipt(ctx, "no-such-token")
	require.ErrorIs(t, err, ErrNoReceipt)
	_, err = s.Receipts(ctx, Filter{State: "stuck"})
	require.ErrorIs(t, err, ErrInvalidFilter)
	var audit []AuditEntry
	audit, err = s.Audit(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Empty(t, audit)

	var st Stats
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Total.Succeeded)
	var counts Counts
	counts, err = s.CountSince(ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, int64(1), counts.Completed)
	n, err := s.Unresolved(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.Purge(ctx, PurgeBatchDefault)
	require.NoError(t, err)
	require.Zero(t, n, "a receipt within its retention was purged")

	on, err := s.Partitioned(ctx)
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, s.Partition(ctx))
	on, err = s.Partitioned(ctx)
	require.NoError(t, err)
	require.True(t, on)
	require.Equal(t, operator.RetentionDefault, RetentionDefault)
}
