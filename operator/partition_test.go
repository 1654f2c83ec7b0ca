package operator_test

import (
	"context"
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

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

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

func TestPartitionKeepsEveryReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, schema := setupPlain(t, nil)
	before := call(t, "order-1/charge", map[string]int{"cents": 500})
	_, err := activity.Do(ctx, s, before, func(context.Context) (string, error) { return "ch_1", nil })
	require.NoError(t, err)

	on, err := op.Partitioned(ctx)
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, op.Partition(ctx))
	require.NoError(t, op.Partition(ctx), "a second Partition only creates partitions ahead")
	on, err = op.Partitioned(ctx)
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
	s, op, schema := setupPlain(t, nil)
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

	require.NoError(t, op.Partition(ctx))
	ageLegacy(t, schema)

	// A live lease holds the partition: its attempt's next write would fail on a move.
	_, err := op.Purge(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, schema+".receipts_legacy", partitionOf(t, schema, running.Key))
	for _, c := range []activity.Call{extended, unresolved} {
		require.NotEqual(t, schema+".receipts_legacy", partitionOf(t, schema, c.Key), "%s was not moved out", c.Key.ID)
	}

	// Once the lease has ended, the receipt (unresolved now: its attempt may have had its
	// effect) moves too, and the day is dropped with the one receipt it may forget.
	_, err = pool.Exec(ctx, "UPDATE "+schema+".receipts SET lease_expires_at = now() - interval '1 second' WHERE id = 'running'")
	require.NoError(t, err)
	_, err = op.Purge(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, partitionOf(t, schema, expired.Key), "the expired receipt outlived its partition")
	var legacy *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", schema+".receipts_legacy").Scan(&legacy))
	require.Nil(t, legacy, "the retired partition is still there")
	for _, c := range []activity.Call{extended, unresolved, running} {
		require.NotEmpty(t, partitionOf(t, schema, c.Key), "%s was dropped with its partition", c.Key.ID)
	}
	n, err := op.Unresolved(ctx)
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

// TestRetirementRacesTakeovers retires a day while attempts take over its receipts: each was left
// pending by an attempt that certainly had no effect, so the day may be dropped with it — unless
// an attempt takes it over first, whose receipt must then survive the retirement. Whichever wins
// each race, every intent runs exactly once and ends with its receipt, and the day is gone once
// the attempts are done.
func TestRetirementRacesTakeovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, schema := setupPlain(t, &activity.Config{InProgressWait: -1})
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
	require.NoError(t, op.Partition(ctx))
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
			_, err := op.Purge(ctx, 0)
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
				if err == nil || time.Now().After(deadline) || !(errors.As(err, new(*activity.StoreError)) || errors.As(err, &inProgress)) {
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
	_, err = op.Purge(ctx, 0)
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
	_, op, schema := setupPlain(t, nil)
	require.NoError(t, op.Partition(ctx))
	ageLegacy(t, schema)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := op.Purge(ctx, 0)
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
	s, op, schema := setupPlain(t, nil)
	_, err := pool.Exec(ctx, "CREATE TABLE "+schema+".receipts_legacy (x int)")
	require.NoError(t, err)

	err = op.Partition(ctx)
	require.ErrorContains(t, err, "RENAME TO receipts_legacy")
	require.ErrorContains(t, err, "run again")
	on, err := op.Partitioned(ctx)
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
	require.NoError(t, op.Partition(ctx))
	require.Equal(t, schema+".receipts_legacy", partitionOf(t, schema, call(t, "order-1/charge", 1).Key))
}
