package outbox

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// One maintenance round prunes every delivered message past retention, batch after batch, not
// one batch a round: at one batch a minute, an outbox delivering more than PruneBatchDefault
// messages a minute grows without bound.
func TestMaintenancePrunesMoreThanOneBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	o, err := New(pgtest.Pool(t), &Config{Schema: name, Retention: time.Hour})
	require.NoError(t, err)
	const expired = 2*PruneBatchDefault + 500
	_, err = pgtest.Pool(t).Exec(ctx, `INSERT INTO `+o.table+` (id, topic, payload, digest, state, delivered_at)
		SELECT 'old-' || g, 't', '\x00', '\x00', 'delivered', now() - interval '2 hours' FROM generate_series(1, $1) AS g`, expired)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, `INSERT INTO `+o.table+` (id, topic, payload, digest, state, delivered_at)
		VALUES ('recent', 't', '\x00', '\x00', 'delivered', now()), ('pending', 't', '\x00', '\x00', 'pending', NULL)`)
	require.NoError(t, err)
	d, err := NewDispatcher(o, PublisherFunc(func(context.Context, Delivery) error { return nil }), &DispatcherConfig{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	d.maintain(ctx)
	var old, kept int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'old-%'), count(*) FILTER (WHERE id IN ('recent', 'pending'))
		FROM `+o.table).Scan(&old, &kept))
	require.Zero(t, old, "one maintenance round left expired delivered messages")
	require.Equal(t, 2, kept, "a message within retention, or a pending one, was pruned")
}

// The defaults the docs promise: a week of retention, ten seconds of shutdown grace (the
// default publish timeout, half the lease, is longer), and the grace bounded by a shorter
// publish timeout.
func TestDefaultsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	name := pgtest.Schema(t)
	o, err := New(pgtest.Pool(t), &Config{Schema: name})
	require.NoError(t, err)
	require.Equal(t, 7*24*time.Hour, o.cfg.Retention)
	pub := PublisherFunc(func(context.Context, Delivery) error { return nil })
	d, err := NewDispatcher(o, pub, nil)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, d.cfg.ShutdownGrace)
	require.Equal(t, 15*time.Second, d.cfg.PublishTimeout)
	d, err = NewDispatcher(o, pub, &DispatcherConfig{PublishTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, d.cfg.ShutdownGrace)
}

// expiredOutbox is an outbox of a new migrated schema with a retention of an hour and n
// delivered messages two hours old.
func expiredOutbox(t *testing.T, n int) *Outbox {
	t.Helper()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	o, err := New(pgtest.Pool(t), &Config{Schema: name, Retention: time.Hour, NoNotify: true})
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, `INSERT INTO `+o.table+` (id, topic, payload, digest, state, delivered_at)
		SELECT 'old-' || g, 't', '\x00', '\x00', 'delivered', now() - interval '2 hours' FROM generate_series(1, $1) AS g`, n)
	require.NoError(t, err)
	return o
}

// expiredLeft counts o's delivered messages past retention.
func expiredLeft(t *testing.T, o *Outbox) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		`SELECT count(*) FROM `+o.table+` WHERE id LIKE 'old-%'`).Scan(&n))
	return n
}

// A backlog of expired messages larger than one maintenance round is pruned while delivering:
// Drain prunes a batch after each batch it delivers until pruning is caught up, rather than
// leaving the rest to the next maintenance, a Maintenance period later.
func TestDrainPrunesWhileBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const rounds = 5
	o := expiredOutbox(t, (pruneRoundBatches+rounds)*PruneBatchDefault)
	_, err := pgtest.Pool(t).Exec(ctx, `INSERT INTO `+o.table+` (id, topic, payload, digest)
		SELECT 'new-' || g, 't', '\x00', '\x00' FROM generate_series(1, $1) AS g`, rounds*BatchDefault+1)
	require.NoError(t, err)
	d, err := NewDispatcher(o, PublisherFunc(func(context.Context, Delivery) error { return nil }), &DispatcherConfig{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	d.maintain(ctx)
	require.Equal(t, rounds*PruneBatchDefault, expiredLeft(t, o), "one maintenance round prunes pruneRoundBatches batches")
	require.True(t, d.behind.Load())
	k, err := d.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, rounds*BatchDefault+1, k)
	require.Zero(t, expiredLeft(t, o), "the drain's full batches did not prune the rest")
	require.True(t, d.behind.Load(), "the last pruning batch came back full: whether more are waiting is not known yet")
}

// Run goes on pruning in its idle time while pruning is behind, rather than waiting for the
// next maintenance.
func TestRunPrunesUntilCaughtUp(t *testing.T) {
	t.Parallel()
	o := expiredOutbox(t, 3*pruneRoundBatches*PruneBatchDefault/2)
	d, err := NewDispatcher(o, PublisherFunc(func(context.Context, Delivery) error { return nil }),
		&DispatcherConfig{Logger: slog.New(slog.DiscardHandler), Maintenance: time.Hour, Poll: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	require.Eventually(t, func() bool { return expiredLeft(t, o) == 0 }, 30*time.Second, 10*time.Millisecond,
		"Run left expired messages for the next maintenance, an hour later")
	cancel()
	require.NoError(t, <-done)
	require.False(t, d.behind.Load())
}
