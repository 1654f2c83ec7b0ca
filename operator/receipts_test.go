package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/operator"
)

func TestReceipts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, _ := setup(t, nil)
	for i := range 5 {
		c := call(t, fmt.Sprintf("order-%d/charge", i), map[string]int{"amount": i})
		if i == 4 {
			c.Key.Tenant, c.Key.Operation = "globex", "Refund"
		}
		_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}

	var seen []string
	f := operator.Filter{Limit: 2}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		page, err := op.Receipts(ctx, f)
		require.NoError(t, err)
		for _, r := range page.Receipts {
			seen = append(seen, r.Key.ID)
		}
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	require.Equal(t, []string{"order-0/charge", "order-1/charge", "order-2/charge", "order-3/charge", "order-4/charge"}, seen)

	globex := "globex"
	page, err := op.Receipts(ctx, operator.Filter{Tenant: &globex})
	require.NoError(t, err)
	require.Len(t, page.Receipts, 1)
	page, err = op.Receipts(ctx, operator.Filter{Operation: "Charge", State: operator.StateCompleted})
	require.NoError(t, err)
	require.Len(t, page.Receipts, 4)
	page, err = op.Receipts(ctx, operator.Filter{NewerThan: time.Hour, OlderThan: time.Minute})
	require.NoError(t, err)
	require.Empty(t, page.Receipts)

	_, err = op.Receipts(ctx, operator.Filter{State: "stuck"})
	require.ErrorContains(t, err, "give pending, completed, failed")
	_, err = op.Receipts(ctx, operator.Filter{After: "not-a-cursor"})
	require.ErrorContains(t, err, "page cursor")

	st, err := op.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Total.Succeeded)
	require.Len(t, st.Operations, 2)
	require.Equal(t, "Charge", st.Operations[0].Operation)
	require.Equal(t, int64(4), st.Operations[0].Succeeded)
}
