package activity_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

// partitioned returns a migrated store whose receipts are partitioned, and its schema.
func partitioned(t *testing.T, cfg *activity.Config) (*activity.Store, string) {
	t.Helper()
	s, schema := setup(t, cfg)
	require.NoError(t, s.Partition(context.Background()))
	return s, schema
}

// partitionOf returns the partition that holds k's receipt ("" when there is none).
func partitionOf(t *testing.T, schema string, k keys.Key) string {
	t.Helper()
	var name string
	err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT tableoid::regclass::text FROM "+schema+
		".receipts WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)", k.Namespace, k.Tenant, k.Operation, k.ID).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return name
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

func TestPartitionKeepsEveryReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setupPlain(t, nil)
	before := call(t, "order-1/charge", map[string]int{"cents": 500})
	_, err := activity.Do(ctx, s, before, func(context.Context) (string, error) { return "ch_1", nil })
	require.NoError(t, err)

	on, err := s.Partitioned(ctx)
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, s.Partition(ctx))
	require.NoError(t, s.Partition(ctx), "a second Partition only creates partitions ahead")
	on, err = s.Partitioned(ctx)
	require.NoError(t, err)
	require.True(t, on)
	require.NoError(t, s.Check(ctx))

	// The receipt written before is in the old table, now a partition, and replays.
	require.Equal(t, schema+".receipts_legacy", partitionOf(t, schema, before.Key))
	got, err := activity.Do(ctx, s, before, func(context.Context) (string, error) {
		t.Error("a receipt written before the conversion was not found")
		return "", nil
	})
	require.NoError(t, err)
	require.Equal(t, "ch_1", got)

	// Partitions cover the days ahead.
	var ahead time.Duration
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT (max((regexp_match(pg_get_expr(relpartbound, oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz) - now())
		FROM pg_class WHERE oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass)`, schema+".receipts").Scan(&ahead))
	require.GreaterOrEqual(t, ahead, 3*24*time.Hour)

	after := call(t, "order-2/charge", map[string]int{"cents": 700})
	_, err = activity.Do(ctx, s, after, func(context.Context) (string, error) { return "ch_2", nil })
	require.NoError(t, err)
	require.Equal(t, 2, countReceipts(t, schema))
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

// ageLegacy makes the legacy partition a closed day whose retention ended long ago, as it is
// weeks after Partition: its receipts' bucket, and its bound, move 30 days back; a partition
// fills the gap to the first day partition.
func ageLegacy(t *testing.T, schema string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	var firstDay time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT (regexp_match(pg_get_expr(relpartbound, oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz
		FROM pg_class WHERE oid = $1::regclass`, schema+".receipts_legacy").Scan(&firstDay))
	for _, stmt := range []string{
		"ALTER TABLE " + schema + ".receipts DETACH PARTITION " + schema + ".receipts_legacy",
		"ALTER TABLE " + schema + ".receipts_legacy DROP CONSTRAINT receipts_legacy_bound",
		"UPDATE " + schema + ".receipts_legacy SET bucket = now() - interval '31 days'",
		"ALTER TABLE " + schema + ".receipts ATTACH PARTITION " + schema + ".receipts_legacy FOR VALUES FROM (MINVALUE) TO (now() - interval '30 days')",
	} {
		_, err := tx.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	_, err = tx.Exec(ctx, "CREATE TABLE "+schema+".receipts_gap PARTITION OF "+schema+".receipts FOR VALUES FROM (now() - interval '30 days') TO ('"+
		firstDay.Format(time.RFC3339Nano)+"')")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

func TestPurgeDropsRetiredPartitionsAndKeepsWhatMustStay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s, schema := setupPlain(t, nil)
	charge := func(id string, fn func(context.Context) (string, error)) activity.Call {
		c := call(t, id, map[string]string{"id": id})
		_, _ = activity.Do(ctx, s, c, fn)
		return c
	}
	ok := func(context.Context) (string, error) { return "ok", nil }
	expired := charge("expired", ok)
	extended := charge("extended", ok)     // a takeover late in its life extended its retention
	unresolved := charge("unresolved", ok) // made pending below, its lease ended: an attempt that may have had its effect
	running := charge("running", ok)       // made a live reservation below
	for _, stmt := range []struct {
		sql string
		k   keys.Key
	}{
		{"UPDATE %s.receipts SET expires_at = now() - interval '1 day' WHERE id = $1", expired.Key},
		{"UPDATE %s.receipts SET state = 'pending', expires_at = now() - interval '1 day', lease_expires_at = now() - interval '1 hour' WHERE id = $1", unresolved.Key},
		{"UPDATE %s.receipts SET expires_at = now() + interval '1 day' WHERE id = $1", extended.Key},
		{"UPDATE %s.receipts SET state = 'pending', expires_at = now() - interval '1 day', lease_expires_at = now() + interval '1 hour' WHERE id = $1", running.Key},
	} {
		_, err := pool.Exec(ctx, fmt.Sprintf(stmt.sql, schema), stmt.k.ID)
		require.NoError(t, err)
	}
	var createdBefore time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT created_at FROM "+schema+".receipts WHERE id = 'unresolved'").Scan(&createdBefore))

	require.NoError(t, s.Partition(ctx))
	ageLegacy(t, schema)

	// A live lease holds the partition: its attempt's next write would fail on a move.
	_, err := s.Purge(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, schema+".receipts_legacy", partitionOf(t, schema, running.Key))
	for _, c := range []activity.Call{extended, unresolved} {
		require.NotEqual(t, schema+".receipts_legacy", partitionOf(t, schema, c.Key), "%s was not moved out", c.Key.ID)
	}

	// Once the lease has ended, the receipt (unresolved now: its attempt may have had its
	// effect) moves too, and the day is dropped with the one receipt it may forget.
	_, err = pool.Exec(ctx, "UPDATE "+schema+".receipts SET lease_expires_at = now() - interval '1 second' WHERE id = 'running'")
	require.NoError(t, err)
	_, err = s.Purge(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, partitionOf(t, schema, expired.Key), "the expired receipt outlived its partition")
	var legacy *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", schema+".receipts_legacy").Scan(&legacy))
	require.Nil(t, legacy, "the retired partition is still there")
	for _, c := range []activity.Call{extended, unresolved, running} {
		require.NotEmpty(t, partitionOf(t, schema, c.Key), "%s was dropped with its partition", c.Key.ID)
	}
	n, err := s.Unresolved(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the unresolved receipts are still counted")

	// A moved receipt keeps its age, which decides whether its token may still be sent.
	var createdAfter time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT created_at FROM "+schema+".receipts WHERE id = 'unresolved'").Scan(&createdAfter))
	require.True(t, createdBefore.Equal(createdAfter))
	got, err := activity.Do(ctx, s, extended, func(context.Context) (string, error) {
		t.Error("a moved receipt was not found")
		return "", nil
	})
	require.NoError(t, err)
	require.Equal(t, "ok", got)
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

// TestRetirementRacesTakeovers retires a day while attempts take over its receipts: each was left
// pending by an attempt that certainly had no effect, so the day may be dropped with it — unless
// an attempt takes it over first, whose receipt must then survive the retirement. Whichever wins
// each race, every intent runs exactly once and ends with its receipt, and the day is gone once
// the attempts are done.
func TestRetirementRacesTakeovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setupPlain(t, &activity.Config{InProgressWait: -1})
	const n = 40
	calls := make([]atomic.Int32, n)
	intent := func(i int) activity.Call { return call(t, fmt.Sprint("order-", i), i) }
	for i := range n {
		_, err := activity.Do(ctx, s, intent(i), func(context.Context) (int, error) {
			return 0, activity.NotApplied(errors.New("connection refused"))
		})
		require.Error(t, err)
	}
	_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+schema+".receipts SET expires_at = now() - interval '1 second'")
	require.NoError(t, err)
	require.NoError(t, s.Partition(ctx))
	ageLegacy(t, schema)

	done := make(chan struct{})
	var purger sync.WaitGroup
	purger.Go(func() {
		time.Sleep(rand.N(100 * time.Millisecond))
		for {
			select {
			case <-done:
				return
			default:
			}
			_, err := s.Purge(ctx, 0)
			assert.NoError(t, err)
		}
	})
	var attempts sync.WaitGroup
	for i := range n {
		attempts.Go(func() {
			time.Sleep(rand.N(100 * time.Millisecond)) // spread the attempts around the purger's first round
			deadline := time.Now().Add(time.Minute)
			for {
				_, err := activity.Do(ctx, s, intent(i), func(context.Context) (int, error) {
					calls[i].Add(1)
					return i, nil
				})
				var inProgress *activity.InProgressError
				if err == nil || time.Now().After(deadline) || !(errors.Is(err, activity.ErrStore) || errors.As(err, &inProgress)) {
					assert.NoError(t, err, "order-%d", i)
					return
				}
			}
		})
	}
	attempts.Wait()
	close(done)
	purger.Wait()

	for i := range n {
		require.EqualValues(t, 1, calls[i].Load(), "order-%d ran %d times", i, calls[i].Load())
		got, err := activity.Do(ctx, s, intent(i), func(context.Context) (int, error) {
			t.Errorf("order-%d's receipt was lost", i)
			return 0, nil
		})
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
	_, err = s.Purge(ctx, 0)
	require.NoError(t, err)
	var legacy *string
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT to_regclass($1)::text", schema+".receipts_legacy").Scan(&legacy))
	require.Nil(t, legacy, "the retired day is still there once nothing holds it")
	require.Equal(t, n, countReceipts(t, schema))
}

// TestPurgersRetireTogether runs purgers of one schema at once, as a worker's and an operator's
// can: one of them retires the day, and none fails because another did.
func TestPurgersRetireTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setupPlain(t, nil)
	require.NoError(t, s.Partition(ctx))
	ageLegacy(t, schema)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := s.Purge(ctx, 0)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	var legacy *string
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT to_regclass($1)::text", schema+".receipts_legacy").Scan(&legacy))
	require.Nil(t, legacy)
}

// TestPartitionThatFailsLeavesReceiptsAsTheyWere makes the conversion's last step fail (a table
// already holds the legacy partition's name): the error says what failed, the table is still
// the plain one and takes receipts, the constraint that would refuse them in two days is gone,
// and a second run once the obstacle is removed converts it.
func TestPartitionThatFailsLeavesReceiptsAsTheyWere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s, schema := setupPlain(t, nil)
	_, err := pool.Exec(ctx, "CREATE TABLE "+schema+".receipts_legacy (x int)")
	require.NoError(t, err)

	err = s.Partition(ctx)
	require.ErrorContains(t, err, "RENAME TO receipts_legacy")
	require.ErrorContains(t, err, "run again")
	on, err := s.Partitioned(ctx)
	require.NoError(t, err)
	require.False(t, on)
	var constraints int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_constraint WHERE conname = 'receipts_legacy_bound' AND connamespace = $1::regnamespace",
		schema).Scan(&constraints))
	require.Zero(t, constraints, "the legacy bound outlived the failed conversion")
	_, err = activity.Do(ctx, s, call(t, "order-1/charge", 1), func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	_, err = pool.Exec(ctx, "DROP TABLE "+schema+".receipts_legacy")
	require.NoError(t, err)
	require.NoError(t, s.Partition(ctx))
	require.Equal(t, schema+".receipts_legacy", partitionOf(t, schema, call(t, "order-1/charge", 1).Key))
}
