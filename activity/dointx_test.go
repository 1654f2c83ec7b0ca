package activity_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/temporaltest"
)

// inTx runs DoInTx in a transaction of its own that the caller's code commits when commit says so.
func inTx(ctx context.Context, pool *pgxpool.Pool, s *activity.Store, c activity.Call, fn func(context.Context, pgx.Tx) (int, error), commit bool) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	out, err := activity.DoInTx(ctx, s, tx, c, fn)
	if err != nil || !commit {
		return out, err
	}
	return out, tx.Commit(ctx)
}

func TestDoInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	t.Run("ReceiptCommitsWithTheCaller", func(t *testing.T) {
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-1/reserve", map[string]int{"units": 3})
		left, err := inTx(ctx, pool, s, c, reserve(schema, 3), false) // the caller rolls back
		require.NoError(t, err)
		require.Equal(t, 7, left)
		stock, outbox := units(t, schema)
		require.Equal(t, 10, stock, "a rolled back transaction kept its writes")
		require.Equal(t, 0, outbox)
		require.Equal(t, 0, countReceipts(t, schema), "a rolled back transaction kept its receipt")

		for range 2 {
			left, err = inTx(ctx, pool, s, c, reserve(schema, 3), true)
			require.NoError(t, err)
			require.Equal(t, 7, left, "the replay returns the first result")
		}
		stock, outbox = units(t, schema)
		require.Equal(t, 7, stock, "the replay ran the function again")
		require.Equal(t, 1, outbox)
		require.Equal(t, 1, countReceipts(t, schema))

		_, err = inTx(ctx, pool, s, call(t, "order-1/reserve", map[string]int{"units": 4}), reserve(schema, 4), true)
		temporaltest.RequireAppError(t, err, activity.ErrTypePayloadMismatch, false)
	})

	t.Run("FailureUndoesOnlyTheSavepoint", func(t *testing.T) {
		s, schema := setup(t, nil)
		stockSetup(t, schema)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "INSERT INTO "+schema+".shipments (kind) VALUES ('order placed')")
		require.NoError(t, err)

		// A retryable error: fn's writes are undone, no receipt, and tx goes on.
		_, err = activity.DoInTx(ctx, s, tx, call(t, "order-2/reserve", 1), func(ctx context.Context, tx pgx.Tx) (int, error) {
			if _, err := reserve(schema, 1)(ctx, tx); err != nil {
				return 0, err
			}
			return 0, errors.New("warehouse API timed out")
		})
		require.ErrorContains(t, err, "timed out")
		// A non-retryable error: undone too, and recorded, to be replayed once tx commits.
		declined := func(ctx context.Context, tx pgx.Tx) (int, error) {
			if _, err := reserve(schema, 2)(ctx, tx); err != nil {
				return 0, err
			}
			return 0, temporal.NewNonRetryableApplicationError("sku discontinued", "Discontinued", nil)
		}
		_, err = activity.DoInTx(ctx, s, tx, call(t, "order-3/reserve", 2), declined)
		temporaltest.RequireAppError(t, err, "Discontinued", false)
		require.NoError(t, tx.Commit(ctx))

		stock, outbox := units(t, schema)
		require.Equal(t, 10, stock, "a failed function's writes were kept")
		require.Equal(t, 1, outbox, "the caller's own write was lost")
		require.Equal(t, 1, countReceipts(t, schema), "only the final failure is recorded")
		calls := 0
		_, err = inTx(ctx, pool, s, call(t, "order-3/reserve", 2), func(ctx context.Context, tx pgx.Tx) (int, error) { calls++; return 0, nil }, true)
		temporaltest.RequireAppError(t, err, "Discontinued", false)
		require.Zero(t, calls, "a recorded failure ran the function again")
	})

	// Two transactions with the same intent at once: the second waits at the receipt's unique
	// index, and when the first commits it replays the first one's result (READ COMMITTED) or is
	// told to retry (REPEATABLE READ, whose snapshot cannot see it). One effect either way.
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run("ConcurrentDuplicate"+string(iso), func(t *testing.T) {
			s, schema := setup(t, nil)
			if os.Getenv("TEMPOTENT_TEST_PARTITIONED") != "" && iso != pgx.ReadCommitted {
				t.Skip("a partitioned table refuses receipts outside READ COMMITTED: TestPartitionedReceiptsAreWrittenUnderReadCommitted")
			}
			stockSetup(t, schema)
			c := call(t, "order-4/reserve", 1)

			first, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			defer func() { _ = first.Rollback(ctx) }()
			second, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			defer func() { _ = second.Rollback(ctx) }()
			// Both take their snapshot before either writes.
			for _, tx := range []pgx.Tx{first, second} {
				_, err := tx.Exec(ctx, "SELECT count(*) FROM "+schema+".shipments")
				require.NoError(t, err)
			}
			left, err := activity.DoInTx(ctx, s, first, c, reserve(schema, 1))
			require.NoError(t, err)
			require.Equal(t, 9, left)

			var (
				wg        sync.WaitGroup
				secondErr error
				secondOut int
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// It reads only; its receipt INSERT waits at the unique index for first's receipt.
				secondOut, secondErr = activity.DoInTx(ctx, s, second, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
					var n int
					err := tx.QueryRow(ctx, "SELECT count(*) FROM "+schema+".shipments").Scan(&n)
					return 100 + n, err
				})
			}()
			time.Sleep(200 * time.Millisecond) // let it reach the unique index
			require.NoError(t, first.Commit(ctx))
			wg.Wait()
			if iso == pgx.ReadCommitted {
				require.NoError(t, secondErr)
				require.Equal(t, 9, secondOut, "the duplicate did not replay the first one's result")
				require.NoError(t, second.Commit(ctx))
			} else {
				temporaltest.RequireAppError(t, secondErr, activity.ErrTypeInProgress, true)
			}
			stock, outbox := units(t, schema)
			require.Equal(t, 9, stock)
			require.Equal(t, 1, outbox)
			require.Equal(t, 1, countReceipts(t, schema))
		})
	}

	t.Run("NilTx", func(t *testing.T) {
		s, _ := setup(t, nil)
		_, err := activity.DoInTx(ctx, s, nil, call(t, "order-5/reserve", 1), reserve("x", 1))
		require.ErrorContains(t, err, "tx is nil")
	})
}
