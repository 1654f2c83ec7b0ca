package payment_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/samples/payment"
)

// TestMigrateConcurrent starts eight workers' migrations at once on a new database, as a fleet
// of workers does on its first deployment: each must succeed.
func TestMigrateConcurrent(t *testing.T) {
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "tempotent_sample_" + hex.EncodeToString(b[:])
	admin := pgtest.Pool(t)
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
	})
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.ConnConfig.Database = db

	const workers = 8
	pools := make([]*pgxpool.Pool, workers)
	for i := range pools {
		pools[i], err = pgxpool.NewWithConfig(ctx, cfg.Copy())
		require.NoError(t, err)
		t.Cleanup(pools[i].Close)
		require.NoError(t, pools[i].Ping(ctx)) // connected first, so that all start together
	}
	start := make(chan struct{})
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() {
			<-start
			errs[i] = payment.Migrate(ctx, pool)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker %d", i)
	}
	var units int64
	require.NoError(t, pools[0].QueryRow(ctx, "SELECT units FROM payment_sample.stock WHERE sku = 'widget'").Scan(&units))
	require.Positive(t, units)
}
