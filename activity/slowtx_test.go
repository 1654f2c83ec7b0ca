package activity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/operator"
)

// A store's statement timeout short enough that a function slower than the deadline of one write
// (the statement timeout and a second's margin for the round trip) is quick to write, and long
// enough for the receipt's own statements (on a partitioned table, its uniqueness trigger too).
const (
	shortStatementTimeout     = 100 * time.Millisecond
	slowerThanTheWriteTimeout = shortStatementTimeout + 1200*time.Millisecond
)

// A DoInNewTx function that runs longer than the store's statement timeout still commits: the
// timeouts of the receipt's own statements count from when each is sent, not from before fn ran.
// Before, the write context was made before fn, COMMIT was never sent, every retry redid the work,
// and a final error of fn was never recorded.
func TestDoInNewTxSlowerThanTheStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slow := func(ctx context.Context) {
		select {
		case <-ctx.Done():
		case <-time.After(slowerThanTheWriteTimeout):
		}
	}

	t.Run("CommitsOnce", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, &activity.Config{StatementTimeout: shortStatementTimeout})
		stockSetup(t, schema)
		c := call(t, "order-1/reserve", map[string]int{"units": 3})
		left, err := activity.DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
			left, err := reserve(schema, 3)(ctx, tx)
			slow(ctx)
			return left, err
		})
		require.NoError(t, err, "a function slower than the statement timeout did not commit")
		require.Equal(t, 7, left)
		again, err := activity.DoInNewTx(ctx, s, c, func(context.Context, pgx.Tx) (int, error) {
			t.Error("the retry ran the mutation again")
			return 0, nil
		})
		require.NoError(t, err)
		require.Equal(t, 7, again)
		stock, shipments := units(t, schema)
		require.Equal(t, 7, stock)
		require.Equal(t, 1, shipments)
	})

	t.Run("RecordsAFinalError", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, &activity.Config{StatementTimeout: shortStatementTimeout})
		stockSetup(t, schema)
		c := call(t, "order-2/reserve", map[string]int{"units": 30})
		_, err := activity.DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
			slow(ctx)
			return 0, temporal.NewNonRetryableApplicationError("not enough stock", "OutOfStock", nil)
		})
		var storeErr *activity.StoreError
		require.False(t, errors.As(err, &storeErr), "the final error was not recorded: %v", err)
		requireAppErrorType(t, err, "OutOfStock")
		state, _ := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateFailed, state, "the final error of a slow function was not recorded")
		_, err = activity.DoInNewTx(ctx, s, c, func(context.Context, pgx.Tx) (int, error) {
			t.Error("the retry ran the function again after its final error")
			return 0, nil
		})
		requireAppErrorType(t, err, "OutOfStock")
	})
}

func requireAppErrorType(t *testing.T, err error, want string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, want, appErr.Type(), "error: %v", err)
}
