package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// newerTx runs Newer in a transaction of its own and commits it.
func newerTx(t *testing.T, ib *inbox.Inbox, object string, version int64) bool {
	t.Helper()
	var newer bool
	err := pgx.BeginFunc(context.Background(), pgtest.Pool(t), func(tx pgx.Tx) error {
		var err error
		newer, err = ib.Newer(context.Background(), tx, object, version)
		return err
	})
	require.NoError(t, err)
	return newer
}

// storedVersion is the version the consumer's record of object holds, 0 without a record.
func storedVersion(t *testing.T, name, consumer, object string) int64 {
	t.Helper()
	var v int64
	err := pgtest.Pool(t).QueryRow(context.Background(), "SELECT coalesce(max(version), 0) FROM "+name+".inbox_versions WHERE consumer = $1 AND object_id = $2",
		consumer, object).Scan(&v)
	require.NoError(t, err)
	return v
}

// Newer is true for the first version and each greater one; a repeat or an older one is not
// newer and leaves the record; consumers keep records of their own.
func TestNewerSequence(t *testing.T) {
	t.Parallel()
	ib, name := setup(t, inbox.Config{Consumer: "ledger"})
	other, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "mailer", Schema: name})
	require.NoError(t, err)
	for _, step := range []struct {
		version int64
		newer   bool
		stored  int64
	}{{3, true, 3}, {3, false, 3}, {2, false, 3}, {4, true, 4}, {1, false, 4}, {100, true, 100}} {
		require.Equal(t, step.newer, newerTx(t, ib, "ch_1", step.version), "version %d", step.version)
		require.Equal(t, step.stored, storedVersion(t, name, "ledger", "ch_1"), "after version %d", step.version)
	}
	require.True(t, newerTx(t, ib, "ch_2", 1), "another object's first version")
	require.True(t, newerTx(t, other, "ch_1", 2), "another consumer's first version of the object")
	require.Equal(t, int64(100), storedVersion(t, name, "ledger", "ch_1"))
}

// A transaction that rolls back after Newer said newer leaves the record where it was: the
// event, delivered again, is newer again, and an older event than it still applies.
func TestNewerRollbackMovesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "ledger"})
	require.True(t, newerTx(t, ib, "ch_1", 5))

	failed := errors.New("the consumer's write failed")
	err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		newer, err := ib.Newer(ctx, tx, "ch_1", 7)
		require.NoError(t, err)
		require.True(t, newer)
		return failed
	})
	require.ErrorIs(t, err, failed)
	require.Equal(t, int64(5), storedVersion(t, name, "ledger", "ch_1"), "a rolled-back Newer moved the record")
	require.True(t, newerTx(t, ib, "ch_1", 6), "an event older than the rolled-back one, newer than the record, was skipped")
	require.True(t, newerTx(t, ib, "ch_1", 7), "the rolled-back event, delivered again, was skipped")
}

// An event that races one of the same object waits for it, and compares with what it
// committed; if it rolls back, with the record before it.
func TestNewerWaitsForARacingEvent(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("FirstCommits=%v", commit), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ib, name := setup(t, inbox.Config{Consumer: "ledger"})
			require.True(t, newerTx(t, ib, "ch_1", 1))
			first, err := pgtest.Pool(t).Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = first.Rollback(ctx) })
			newer, err := ib.Newer(ctx, first, "ch_1", 5)
			require.NoError(t, err)
			require.True(t, newer)

			second := make(chan bool, 1)
			go func() {
				defer close(second)
				var newer bool
				err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
					var err error
					newer, err = ib.Newer(ctx, tx, "ch_1", 3)
					return err
				})
				if err == nil {
					second <- newer
				}
			}()
			// The second waits on the first's row lock; then the first ends.
			require.Eventually(t, func() bool { return lockWaiters(t, name) == 1 }, pgtestWait, pgtestTick, "the racing event did not wait for the first")
			if commit {
				require.NoError(t, first.Commit(ctx))
			} else {
				require.NoError(t, first.Rollback(ctx))
			}
			got, ok := <-second
			require.True(t, ok, "the racing event failed")
			require.Equal(t, !commit, got, "version 3 after version 5 committed must be stale, and newer when 5 rolled back")
			want := int64(5)
			if !commit {
				want = 3
			}
			require.Equal(t, want, storedVersion(t, name, "ledger", "ch_1"))
		})
	}
}

// lockWaiters counts the sessions waiting for a lock on a row of the schema's inbox_versions.
func lockWaiters(t *testing.T, name string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE NOT l.granted AND a.query LIKE '%' || $1 || '%inbox_versions%'`, name).Scan(&n))
	return n
}

// An empty object or a version below 1 is a *VersionError, non-retryable for Temporal, sent to
// no one: the caller's transaction stays usable and nothing is recorded.
func TestNewerRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "ledger"})
	for _, tc := range []struct {
		object  string
		version int64
		says    string
	}{{"", 1, "empty object ID"}, {"ch_1", 0, "version 0 is below 1"}, {"ch_1", -5, "version -5 is below 1"}} {
		err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
			newer, err := ib.Newer(ctx, tx, tc.object, tc.version)
			require.False(t, newer)
			var ve *inbox.VersionError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, inbox.VersionError{Consumer: "ledger", Object: tc.object, Version: tc.version}, *ve)
			require.ErrorContains(t, err, tc.says)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			require.Equal(t, inbox.ErrTypeInvalidVersion, appErr.Type())
			require.True(t, appErr.NonRetryable())
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err, "the transaction is not usable after a refused call")
			return nil
		})
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM "+name+".inbox_versions").Scan(&n))
	require.Zero(t, n)
}

// TestExploreNewer delivers seeded histories of events, (object, version) pairs with repeats
// and ties, shuffled, from several goroutines at once, each event in a transaction of its own
// that applies it (a row in an applied log) when Newer says so; some transactions fail after
// Newer and roll back, and their event is delivered again later, as a consumer's redelivery
// would.
//
// The model is the list of events. Per object, the events applied, in the order they
// committed (the log's sequence: the object's row lock orders them), form a strictly
// increasing chain that ends at the greatest version sent; the record holds that version; and
// no rolled-back event is in the log.
//
// It runs TEMPOTENT_EXPLORE_NEWER_N histories (default 8) from TEMPOTENT_EXPLORE_SEED (default
// 1); a failing history prints its seed, and TEMPOTENT_EXPLORE_SEED=<seed>
// TEMPOTENT_EXPLORE_NEWER_N=1 replays its events (the interleaving varies from run to run).
func TestExploreNewer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := envInt("TEMPOTENT_EXPLORE_NEWER_N", 8)
	seed := uint64(envInt("TEMPOTENT_EXPLORE_SEED", 1))
	_, name := setup(t, inbox.Config{Consumer: "setup"})
	_, err := pgtest.Pool(t).Exec(ctx, "CREATE TABLE "+name+`.applied (
		seq bigint GENERATED ALWAYS AS IDENTITY, consumer text NOT NULL, object_id text NOT NULL, version bigint NOT NULL, event int NOT NULL)`)
	require.NoError(t, err)
	for i := range uint64(n) {
		s := seed + i
		if err := exploreNewer(ctx, t, name, s); err != nil {
			t.Fatalf("explore: history with seed %d failed: %v\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_NEWER_N=1 go test -race -run TestExploreNewer ./inbox/",
				s, err, s)
		}
	}
}

type event struct {
	n       int
	object  string
	version int64
}

func exploreNewer(ctx context.Context, t *testing.T, name string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x4e57e2))
	consumer := fmt.Sprint("h", seed)
	ib, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: consumer, Schema: name})
	require.NoError(t, err)
	objects := 1 + rng.IntN(3)
	var events []event
	for i := range 20 + rng.IntN(30) {
		// Few versions, so that repeats and ties are common.
		events = append(events, event{n: i, object: fmt.Sprint("obj-", rng.IntN(objects)), version: 1 + rng.Int64N(12)})
	}
	// Each attempt's fate is drawn up front, so that the seed decides which ones fail.
	failProb := rng.Float64() * 0.3
	fails := make([]bool, 4*len(events))
	for i := range fails {
		fails[i] = rng.Float64() < failProb
	}
	queue := make(chan event, len(fails))
	for _, i := range rng.Perm(len(events)) {
		queue <- events[i]
	}
	var (
		mu       sync.Mutex
		attempt  int
		pending  = len(events)
		firstErr error
		wg       sync.WaitGroup
	)
	rolledBack := errors.New("the consumer failed")
	for range 2 + rng.IntN(4) {
		wg.Go(func() {
			for ev := range queue {
				mu.Lock()
				fail := attempt < len(fails) && fails[attempt]
				attempt++
				mu.Unlock()
				err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
					newer, err := ib.Newer(ctx, tx, ev.object, ev.version)
					if err != nil || !newer {
						return err
					}
					if _, err := tx.Exec(ctx, "INSERT INTO "+name+".applied (consumer, object_id, version, event) VALUES ($1, $2, $3, $4)",
						consumer, ev.object, ev.version, ev.n); err != nil {
						return err
					}
					if fail {
						return rolledBack
					}
					return nil
				})
				mu.Lock()
				switch {
				case errors.Is(err, rolledBack):
					queue <- ev // delivered again
				case err != nil:
					firstErr = errors.Join(firstErr, fmt.Errorf("event %d: %w", ev.n, err))
					fallthrough
				default:
					if pending--; pending == 0 {
						close(queue)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}

	want := map[string]int64{}
	for _, ev := range events {
		want[ev.object] = max(want[ev.object], ev.version)
	}
	rows, err := pgtest.Pool(t).Query(ctx, "SELECT object_id, version FROM "+name+".applied WHERE consumer = $1 ORDER BY seq", consumer)
	require.NoError(t, err)
	defer rows.Close() // an open cursor would keep the schema's cleanup waiting for its lock
	chain := map[string][]int64{}
	for rows.Next() {
		var object string
		var version int64
		require.NoError(t, rows.Scan(&object, &version))
		if c := chain[object]; len(c) > 0 && c[len(c)-1] >= version {
			return fmt.Errorf("object %s: version %d applied after %d (applied so far %v)", object, version, c[len(c)-1], c)
		}
		chain[object] = append(chain[object], version)
	}
	require.NoError(t, rows.Err())
	for object, max := range want {
		c := chain[object]
		if len(c) == 0 || c[len(c)-1] != max {
			return fmt.Errorf("object %s: applied %v, the greatest version sent is %d", object, c, max)
		}
		if got := storedVersion(t, name, consumer, object); got != max {
			return fmt.Errorf("object %s: the record holds %d, the greatest version sent is %d", object, got, max)
		}
	}
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// How long a test waits for another session to reach a lock, and how often it looks.
const (
	pgtestWait = 30 * time.Second
	pgtestTick = 10 * time.Millisecond
)
