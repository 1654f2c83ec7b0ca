package activity_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// A panic in the function of DoInNewTx or DoInTx leaves nothing half-written: its writes and the
// receipt are undone together (no receipt, so no recorded outcome), the attempt fails as
// Temporal's activity worker makes every panic fail (a retryable PanicError), and the next
// attempt runs the function.
func TestPanicInTxFunction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RegisteredTxActivity", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		calls := 0
		execute := func() (int, error) {
			env := newActivityEnv("reserve", "order-1")
			require.NoError(t, activity.RegisterTx(env, s, "Reserve", func(ctx context.Context, tx pgx.Tx, n int) (int, error) {
				calls++
				left, err := reserve(schema, n)(ctx, tx)
				if calls == 1 {
					panic("the inventory service's client blew up")
				}
				return left, err
			}, activity.Options{}))
			val, err := env.ExecuteActivity("Reserve", 3)
			if err != nil {
				return 0, err
			}
			var left int
			require.NoError(t, val.Get(&left))
			return left, nil
		}

		_, err := execute()
		var panicErr *temporal.PanicError
		require.ErrorAs(t, err, &panicErr, "the panic did not fail the attempt as the SDK's PanicError: %v", err)
		stock, shipments := units(t, schema)
		require.Equal(t, 10, stock, "the panicked attempt's writes were committed")
		require.Equal(t, 0, shipments)
		require.Equal(t, 0, countReceipts(t, schema), "the panicked attempt left a receipt")

		left, err := execute()
		require.NoError(t, err, "the attempt after a panic did not run")
		require.Equal(t, 7, left)
		left, err = execute()
		require.NoError(t, err)
		require.Equal(t, 7, left)
		require.Equal(t, 2, calls, "the replay ran the function")
		stock, shipments = units(t, schema)
		require.Equal(t, 7, stock)
		require.Equal(t, 1, shipments)
	})

	t.Run("DoInTx", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-2/reserve", map[string]int{"units": 3})
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			// BeginFunc rolls the caller's transaction back on a panic, as a caller's deferred
			// Rollback does.
			_ = pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
				_, err := activity.DoInTx(ctx, s, tx, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
					_, _ = reserve(schema, 3)(ctx, tx)
					panic("boom")
				})
				return err
			})
		}()
		require.Equal(t, "boom", recovered, "DoInTx swallowed or replaced the panic")
		stock, shipments := units(t, schema)
		require.Equal(t, 10, stock)
		require.Equal(t, 0, shipments)
		require.Equal(t, 0, countReceipts(t, schema))

		var left int
		require.NoError(t, pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
			var err error
			left, err = activity.DoInTx(ctx, s, tx, c, reserve(schema, 3))
			return err
		}))
		require.Equal(t, 7, left, "the attempt after a panic did not run")
	})
}
