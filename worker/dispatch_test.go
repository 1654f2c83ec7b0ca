package worker_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/worker"
)

// Dispatch refuses a dispatcher more than the worker's pool has connections: dispatchers each
// take one for their claims and marks, and the activities' receipts would wait behind them.
func TestDispatchRefusesMoreDispatchersThanConnections(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	o, err := outbox.New(pool, nil)
	require.NoError(t, err)
	env := &worker.Env{Pool: pool, Outbox: o, Log: slog.New(slog.DiscardHandler)}
	pub := outbox.PublisherFunc(func(context.Context, outbox.Delivery) error { return nil })
	for _, topic := range []string{"a", "b"} {
		require.NoError(t, env.Dispatch(pub, &outbox.DispatcherConfig{Topics: []string{topic}}))
	}
	err = env.Dispatch(pub, &outbox.DispatcherConfig{Topics: []string{"c"}})
	require.ErrorContains(t, err, "MaxConns 2")
	require.ErrorContains(t, err, "pool_max_conns")
}
