package outbox_test

import (
	"context"
	"fmt"
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
// (migration 011, fillfactor 50): the claims are heap-only updates, which add no index entry.
// The marks that deliver change state, which the partial indexes' predicates read, so they are
// not. Without the fillfactor about a tenth of the claims are heap-only (a page has room for few
// of its rows' new versions); with it, above four fifths (the rest meet a page whose free room
// the marks of the batch before took).
func TestClaimsAreHeapOnlyTupleUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 2000
	o, pool, name := floorOutbox(t, &pgtest.Counter{}, n)
	d := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error { return nil }),
		outbox.DispatcherConfig{Batch: 100, Maintenance: -1})
	before, beforeHOT := tableUpdates(t, pool, name)
	for delivered := 0; delivered < n; {
		k, err := d.DispatchOnce(ctx)
		require.NoError(t, err)
		require.Positive(t, k)
		delivered += k
	}
	updates, hot := tableUpdates(t, pool, name)
	updates, hot = updates-before, hot-beforeHOT
	require.Equal(t, int64(2*n), updates, "one claim and one mark per message")
	t.Logf("%d of %d claims were heap-only updates", hot, n)
	require.GreaterOrEqual(t, hot, int64(n*4/5), "claims that were not heap-only: %d of %d", n-hot, n)
}
