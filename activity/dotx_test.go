package activity_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
)

// stockSetup creates a stock table with 10 units of "sku-1" in schema.
func stockSetup(t *testing.T, schema string) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), `
		CREATE TABLE `+schema+`.stock (sku text PRIMARY KEY, units int NOT NULL CHECK (units >= 0));
		CREATE TABLE `+schema+`.shipments (id bigserial PRIMARY KEY, kind text NOT NULL);
		INSERT INTO `+schema+`.stock VALUES ('sku-1', 10);`)
	require.NoError(t, err)
}

func units(t *testing.T, schema string) (stock, outbox int) {
	t.Helper()
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT (SELECT units FROM "+schema+".stock), (SELECT count(*) FROM "+schema+".shipments)").Scan(&stock, &outbox))
	return stock, outbox
}

// reserve takes n units and queues a shipment, as the sample's inventory step does.
func reserve(schema string, n int) func(context.Context, pgx.Tx) (int, error) {
	return func(ctx context.Context, tx pgx.Tx) (int, error) {
		var left int
		if err := tx.QueryRow(ctx, "UPDATE "+schema+".stock SET units = units - $1 WHERE sku = 'sku-1' RETURNING units", n).Scan(&left); err != nil {
			return 0, err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+schema+".shipments (kind) VALUES ('ship')")
		return left, err
	}
}

func TestDoTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitsWriteAndReceiptTogetherAndReplays", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-1/reserve", map[string]int{"units": 3})
		left, err := activity.DoInNewTx(ctx, s, c, reserve(schema, 3))
		require.NoError(t, err)
		require.Equal(t, 7, left)
		again, err := activity.DoInNewTx(ctx, s, c, func(context.Context, pgx.Tx) (int, error) {
			t.Error("a replay ran the mutation")
			return 0, nil
		})
		require.NoError(t, err)
		require.Equal(t, 7, again)
		stock, outbox := units(t, schema)
		require.Equal(t, 7, stock)
		require.Equal(t, 1, outbox)
		state, _ := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateCompleted, state)
	})

	t.Run("ErrorAfterWriteLeavesNeitherWriteNorReceipt", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-2/reserve", map[string]int{"units": 3})
		_, err := activity.DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
			if _, err := reserve(schema, 3)(ctx, tx); err != nil {
				return 0, err
			}
			return 0, errors.New("shipping service timed out")
		})
		require.ErrorContains(t, err, "shipping service timed out")
		stock, outbox := units(t, schema)
		require.Equal(t, 10, stock, "the business write survived the error")
		require.Equal(t, 0, outbox)
		require.Equal(t, 0, countReceipts(t, schema), "a receipt survived the error")

		// The retry runs the mutation, once.
		left, err := activity.DoInNewTx(ctx, s, c, reserve(schema, 3))
		require.NoError(t, err)
		require.Equal(t, 7, left)
	})

	t.Run("NonRetryableErrorRollsBackAndIsRecorded", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-3/reserve", map[string]int{"units": 3})
		fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
			if _, err := reserve(schema, 3)(ctx, tx); err != nil {
				return 0, err
			}
			return 0, temporal.NewNonRetryableApplicationError("sku discontinued", "Discontinued", nil)
		}
		for range 2 {
			_, err := activity.DoInNewTx(ctx, s, c, fn)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			require.Equal(t, "Discontinued", appErr.Type())
		}
		stock, outbox := units(t, schema)
		require.Equal(t, 10, stock)
		require.Equal(t, 0, outbox)
		state, _ := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateFailed, state)
	})

	t.Run("ConcurrentDuplicatesMutateOnce", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-4/reserve", map[string]int{"units": 1})
		var runs atomic.Int32
		results, errs := make([]int, 16), make([]error, 16)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				results[i], errs[i] = activity.DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
					runs.Add(1)
					return reserve(schema, 1)(ctx, tx)
				})
			})
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "duplicate %d", i)
		}
		stock, outbox := units(t, schema)
		require.Equal(t, 9, stock, "the local effect happened more than once")
		require.Equal(t, 1, outbox)
		for _, r := range results {
			require.Equal(t, 9, r)
		}
		t.Logf("%d of 16 duplicates ran the function before the receipt's unique index stopped them", runs.Load())
	})

	t.Run("MismatchDoesNotRun", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		_, err := activity.DoInNewTx(ctx, s, call(t, "order-5/reserve", map[string]int{"units": 1}), reserve(schema, 1))
		require.NoError(t, err)
		_, err = activity.DoInNewTx(ctx, s, call(t, "order-5/reserve", map[string]int{"units": 2}), reserve(schema, 2))
		require.ErrorAs(t, err, new(*activity.MismatchError))
		stock, _ := units(t, schema)
		require.Equal(t, 9, stock)
	})
}
