package outbox_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// floorOutbox is an outbox of a new migrated schema on a pool of one connection (so that the
// statistics that connection reports are read back on it, see tableUpdates) whose round trips
// counter counts, with n messages put.
func floorOutbox(t *testing.T, counter *pgtest.Counter, n int) (*outbox.Outbox, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	o, err := outbox.New(pool, &outbox.Config{Schema: name, NoNotify: true})
	require.NoError(t, err)
	for first := 0; first < n; first += 500 {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for i := first; i < min(first+500, n); i++ {
				if err := o.Put(ctx, tx, outbox.Message{ID: fmt.Sprint("m", i), Topic: "t", Payload: []byte(`{"order":"ord_1","amount":4200,"currency":"eur"}`)}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	return o, pool, name
}

// tableUpdates returns the updates of name's outbox table so far, and how many of them were
// heap-only (HOT), from pg_stat_user_tables. The pool has one connection, which made them: it
// is told to report its statistics when the statement that asks ends, and they are read in
// the next one.
func tableUpdates(t *testing.T, pool *pgxpool.Pool, name string) (updates, hot int64) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relid = $1::regclass`, pgx.Identifier{name, "outbox"}.Sanitize()).Scan(&updates, &hot))
	return updates, hot
}

// A claim changes no indexed column, and the table keeps room on its pages for the new versions
// (migration 011, fillfactor 40): the claims are heap-only updates, which add no index entry.
// The marks that deliver change state, which the partial indexes' predicates read, so they are
// not. One claim takes every message here, on pages as Put filled them: each page must have room
// for the new versions of all its rows. Without the fillfactor about a tenth of the claims are
// heap-only. (Between batches, the marks of one batch take some of the room that the next
// batch's claims would use on the page where the two meet, unless it was pruned meanwhile: in a
// drain of batches of 100, four fifths or more of the claims are heap-only, by how much the
// concurrent transactions let Postgres prune.)
func TestClaimsAreHeapOnlyTupleUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 1000
	o, pool, name := floorOutbox(t, &pgtest.Counter{}, n)
	d := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error { return nil }),
		outbox.DispatcherConfig{Batch: n, Maintenance: -1})
	before, beforeHOT := tableUpdates(t, pool, name)
	k, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, k)
	updates, hot := tableUpdates(t, pool, name)
	updates, hot = updates-before, hot-beforeHOT
	require.Equal(t, int64(2*n), updates, "one claim and one mark per message")
	require.Equal(t, int64(n), hot, "claims that were not heap-only: %d of %d", n-hot, n)
}

// Drain sends each batch's marks with the claim of the next batch: one round trip, in one
// transaction, per batch, and one more for the marks of the last batch with the claim that finds
// nothing left. DispatchOnce, which marks on its own, takes two per batch.
func TestDrainTakesOneRoundTripPerBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, batch = 1000, 100
	counter := &pgtest.Counter{}
	o, pool, name := floorOutbox(t, counter, n+batch)
	var published atomic.Int64
	d := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error { published.Add(1); return nil }),
		outbox.DispatcherConfig{Batch: batch, Maintenance: -1})

	counter.Reset()
	k, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, batch, k)
	require.Equal(t, int64(2), counter.RoundTrips(), "DispatchOnce: a claim, then the marks")

	counter.Reset()
	k, err = d.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, n, k)
	require.Equal(t, int64(n/batch+1), counter.RoundTrips(), "round trips of a drain of %d batches", n/batch)
	require.Equal(t, int64(n+batch), published.Load())
	var delivered int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name, "outbox"}.Sanitize()+
		" WHERE state = 'delivered' AND attempts = 1 AND lease_until IS NULL").Scan(&delivered))
	require.Equal(t, n+batch, delivered, "every message marked delivered, at its first attempt")
}

// The claim that carries a batch's marks sees what they changed: a key's next message is claimed
// with the mark that delivers its predecessor, in the same transaction, and not before it. One
// message per batch, all on one key: each round delivers one and claims the next.
func TestDrainClaimsAKeysNextMessageWithItsPredecessorsMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &pgtest.Counter{}
	o, pool, _ := floorOutbox(t, counter, 0)
	const n = 5
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			if err := o.Put(ctx, tx, outbox.Message{ID: fmt.Sprint("k", i), Topic: "t", OrderingKey: "key"}); err != nil {
				return err
			}
		}
		return nil
	}))
	r := newRecorder()
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{Batch: 1, Maintenance: -1})
	counter.Reset()
	k, err := d.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, n, k, "one drain delivers the whole key")
	require.Equal(t, int64(n+1), counter.RoundTrips())
	published, byKey, overlaps := r.snapshot()
	require.Len(t, published, n)
	require.Empty(t, overlaps)
	require.Equal(t, []string{"k0", "k1", "k2", "k3", "k4"}, byKey["key"])
}
