package activity_test

import (
	"context"
	"encoding/hex"
	"fmt"

	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

// partitioned returns a migrated store whose receipts are partitioned, and its schema.
func partitioned(t *testing.T, cfg *activity.Config) (*activity.Store, string) {
	t.Helper()
	s, schema := setupPlain(t, cfg)
	partitionReceipts(t, schema)
	return s, schema
}

// insertRaw writes k's receipt by hand into the partition of bucket, in tx, as another process
// racing across midnight would: state pending (a reservation with a live lease) or completed
// with result.
func insertRaw(t *testing.T, tx pgx.Tx, schema string, c activity.Call, state string, bucket time.Time) {
	t.Helper()
	k := c.Key
	_, err := tx.Exec(context.Background(), `INSERT INTO `+schema+`.receipts (namespace, tenant, operation, id, token,
	fingerprint, fingerprint_version, state, reservation, lease_expires_at, expires_at, completed_at, bucket, result)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, gen_random_uuid(), CASE WHEN $8 = 'pending' THEN now() + interval '1 minute' END,
	now() + interval '1 day', CASE WHEN $8 <> 'pending' THEN now() END, $9,
	CASE WHEN $8 = 'completed' THEN $10::bytea END)`,
		k.Namespace, k.Tenant, k.Operation, k.ID, string(k.Token()), c.Fingerprint.Sum[:], c.Fingerprint.Version, state, bucket,
		voidResult)
	require.NoError(t, err)
}

// voidResult is what a receipt completed with a void result stores (migration 006).
var voidResult, _ = hex.DecodeString("0a170a08656e636f64696e67120b62696e6172792f6e756c6c")

// waitForKeyLock waits until a statement waits for k's advisory lock, the uniqueness trigger's
// (a bigint lock: its high half in classid, its low half in objid).
func waitForKeyLock(t *testing.T, k keys.Key) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), `
			WITH k AS (SELECT hashtextextended($1 || chr(31) || $2 || chr(31) || $3 || chr(31) || $4, 0) AS h)
			SELECT count(*) FROM pg_locks, k WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
				AND classid::bigint = (h >> 32) & 4294967295 AND objid::bigint = h & 4294967295`,
			k.Namespace, k.Tenant, k.Operation, k.ID).Scan(&n))
		return n > 0
	}, 10*time.Second, 5*time.Millisecond)
}

// dayAhead is a time in a day partition ahead: past the legacy partition's bound (midnight two
// days ahead), within the days Partition creates.
func dayAhead() time.Time { return time.Now().Add(60 * time.Hour) }

// raceAcrossDays writes c's receipt by hand in a day partition ahead, in a transaction left open
// while attempt runs and waits on the key's lock, then commits it, and returns attempt's error.
// The attempt's store must wait for locks longer than a loaded machine takes to see it wait.
func raceAcrossDays(t *testing.T, schema string, c activity.Call, state string, attempt func() error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	insertRaw(t, tx, schema, c, state, dayAhead())
	errs := make(chan error, 1)
	go func() { errs <- attempt() }()
	waitForKeyLock(t, c.Key)
	require.NoError(t, tx.Commit(ctx))
	return <-errs
}

// TestPartitionedKeyIsUniqueAcrossDays races an attempt against another process's receipt for
// the same key in another day's partition, committed while the attempt waits: the partitioned
// table's unique index cannot see across partitions, the trigger must.
func TestPartitionedKeyIsUniqueAcrossDays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Reservation", func(t *testing.T) {
		t.Parallel()
		s, schema := partitioned(t, &activity.Config{InProgressWait: -1, LockTimeout: time.Minute})
		c := call(t, "order-1/charge", map[string]int{"cents": 500})
		err := raceAcrossDays(t, schema, c, "pending", func() error {
			_, err := activity.Do(ctx, s, c, func(context.Context) (string, error) {
				t.Error("the charge ran beside a live reservation in another partition")
				return "", nil
			})
			return err
		})
		var inProgress *activity.InProgressError
		require.ErrorAs(t, err, &inProgress)
		require.Equal(t, 1, countReceipts(t, schema))
	})

	t.Run("FinishedInTransaction", func(t *testing.T) {
		t.Parallel()
		s, schema := partitioned(t, &activity.Config{LockTimeout: time.Minute})
		stockSetup(t, schema)
		c := call(t, "order-1/reserve", map[string]int{"units": 3})
		err := raceAcrossDays(t, schema, c, "completed", func() error {
			_, err := activity.DoInNewTx(ctx, s, c, reserve(schema, 3))
			return err
		})
		require.NoError(t, err, "the duplicate answers from the receipt that won")
		stock, shipments := units(t, schema)
		require.Equal(t, 10, stock, "the losing transaction's writes were committed")
		require.Zero(t, shipments)
		require.Equal(t, 1, countReceipts(t, schema))
	})

	// The caller's transaction records a final failure of fn while the duplicate's finished
	// receipt commits in another partition: DoInTx answers with the duplicate's outcome, and the
	// caller's transaction stays usable, as on a plain table.
	t.Run("FailureRecordedInCallersTransaction", func(t *testing.T) {
		t.Parallel()
		s, schema := partitioned(t, nil)
		stockSetup(t, schema)
		c := call(t, "order-1/reserve", map[string]int{"units": 3})
		caller, err := pgtest.Pool(t).Begin(ctx)
		require.NoError(t, err)
		defer caller.Rollback(ctx) //nolint:errcheck // committed below
		err = raceAcrossDays(t, schema, c, "completed", func() error {
			_, err := activity.DoInTx(ctx, s, caller, c, func(context.Context, pgx.Tx) (int, error) {
				return 0, temporal.NewNonRetryableApplicationError("out of stock", "OutOfStock", nil)
			})
			return err
		})
		require.NoError(t, err, "the duplicate's receipt is the answer")
		_, err = caller.Exec(ctx, "INSERT INTO "+schema+".shipments (kind) VALUES ('note')")
		require.NoError(t, err, "the caller's transaction was aborted")
		require.NoError(t, caller.Commit(ctx))
		require.Equal(t, 1, countReceipts(t, schema))
	})
}

// TestPartitionedCompletionTouchesOnlyItsOwnRow completes receipts in one partition while
// another partition holds finished receipts at the same physical addresses (ctid): a completion
// that found its row and then updated "the row at that ctid" would overwrite them.
func TestPartitionedCompletionTouchesOnlyItsOwnRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s, schema := partitioned(t, nil)
	const n = 16
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	for i := range n {
		insertRaw(t, tx, schema, call(t, fmt.Sprint("bystander-", i), i), "completed", dayAhead())
	}
	require.NoError(t, tx.Commit(ctx))

	// One alone (a batch of one), then many at once (batches).
	_, err = activity.Do(ctx, s, call(t, "alone", 0), func(context.Context) (string, error) { return "mine", nil })
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := activity.Do(ctx, s, call(t, fmt.Sprint("together-", i), i), func(context.Context) (string, error) { return "mine", nil })
			require.NoError(t, err)
		})
	}
	wg.Wait()

	var overwritten int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".receipts WHERE id LIKE 'bystander-%' AND result IS DISTINCT FROM $1", voidResult).Scan(&overwritten))
	require.Zero(t, overwritten, "completions wrote into another partition's receipts")
}

// TestPartitionedReceiptsAreWrittenUnderReadCommitted: a REPEATABLE READ transaction's snapshot
// cannot see a duplicate committed in another partition after it began, so the trigger refuses
// to write its receipt rather than let a second one in.
func TestPartitionedReceiptsAreWrittenUnderReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := partitioned(t, nil)
	stockSetup(t, schema)
	tx, err := pgtest.Pool(t).BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the test ends with it
	_, err = activity.DoInTx(ctx, s, tx, call(t, "order-1/reserve", 1), reserve(schema, 1))
	require.ErrorIs(t, err, activity.ErrStore)
	require.ErrorContains(t, err, "must be written under READ COMMITTED, not repeatable read")
	require.NoError(t, tx.Rollback(ctx))
	stock, shipments := units(t, schema)
	require.Equal(t, 10, stock)
	require.Zero(t, shipments)
	require.Zero(t, countReceipts(t, schema))
}

func TestPartitionedTableWithoutTodayFailsWithWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := partitioned(t, nil)
	_, err := pgtest.Pool(t).Exec(ctx, "ALTER TABLE "+schema+".receipts DETACH PARTITION "+schema+".receipts_legacy")
	require.NoError(t, err)
	_, err = activity.Do(ctx, s, call(t, "order-1/charge", 1), func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, activity.ErrStore)
	require.ErrorContains(t, err, "operator.Client.Purge creates them")
}
