package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// ownPool returns a pool of maxConns connections whose backends carry application name app,
// closed when t ends.
func ownPool(t *testing.T, maxConns int32, app string) *pgxpool.Pool {
	t.Helper()
	return configuredPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = maxConns
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	})
}

// configuredPool returns a pool on the test database configured by configure, closed when t
// ends.
func configuredPool(t *testing.T, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Four dispatchers, one per topic as worker.Env.Dispatch invites, on a pool of four
// connections (pgxpool's default on a small machine): they deliver everything, listen on one
// connection of their own outside the pool, and leave the pool to the application's queries.
func TestDispatchersDoNotStarveTheirPool(t *testing.T) {
	t.Parallel()
	_, name := setup(t, nil)
	app := "tempotent-starve-" + name
	pool := ownPool(t, 4, app)
	o, err := outbox.New(pool, &outbox.Config{Schema: name})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	r := newRecorder()
	for i := range 4 {
		d := newDispatcher(t, o, r, outbox.DispatcherConfig{Topics: []string{fmt.Sprint("t", i)}, Poll: time.Hour, Maintenance: time.Hour})
		wg.Go(func() { require.NoError(t, d.Run(ctx)) })
	}
	var msgs []outbox.Message
	for i := range 40 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("m", i), Topic: fmt.Sprint("t", i%4)})
	}
	listening := func() bool {
		var n int
		err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'", app).Scan(&n)
		return err == nil && n == 1
	}
	require.Eventually(t, listening, 10*time.Second, 10*time.Millisecond, "the dispatchers do not share one LISTEN connection")

	// An activity's query on the same pool gets a connection; the bound only keeps a starved
	// pool from hanging the test.
	acquireCtx, cancelAcquire := context.WithTimeout(ctx, 10*time.Second)
	defer cancelAcquire()
	conn, err := pool.Acquire(acquireCtx)
	require.NoError(t, err, "the dispatchers hold every connection of the pool")
	conn.Release()

	put(t, ctx, o, msgs...)
	require.Eventually(t, func() bool {
		published, _, _ := r.snapshot()
		return len(published) == len(msgs)
	}, 20*time.Second, 10*time.Millisecond, "the dispatchers did not deliver what was put")
	require.True(t, listening(), "more than one LISTEN connection")
}

// Run refuses to start a dispatcher that would leave its pool no connection: more dispatchers
// on a pool than it has connections.
func TestRunRefusesMoreDispatchersThanConnections(t *testing.T) {
	t.Parallel()
	_, name := setup(t, nil)
	pool := ownPool(t, 1, "tempotent-refuse-"+name)
	o, err := outbox.New(pool, &outbox.Config{Schema: name})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		d := newDispatcher(t, o, newRecorder(), outbox.DispatcherConfig{Poll: time.Hour, Maintenance: -1})
		go func() { errs <- d.Run(ctx) }()
	}
	err = <-errs
	cancel()
	require.ErrorContains(t, err, "MaxConns")
	require.NoError(t, <-errs)
}
