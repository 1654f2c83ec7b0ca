package activity_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// TestMigrateConcurrent starts many workers on a database where the schema does not exist yet,
// each with its own pool, as separate processes would, and requires every Migrate to succeed
// and every migration to be applied once. Two unserialised CREATE SCHEMA IF NOT EXISTS of a new
// schema race in Postgres: one fails with 23505 or 42P06.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_migrate_" + hex.EncodeToString(b[:]) // created by Migrate, not by the test
	t.Cleanup(func() {
		_, _ = pgtest.Pool(t).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})

	const workers = 8
	stores := make([]*activity.Store, workers)
	for i := range stores {
		pool, err := pgxpool.New(ctx, pgtest.URL())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		require.NoError(t, pool.Ping(ctx)) // connected before the start, so that all start together
		stores[i], err = activity.NewStore(pool, &activity.Config{Schema: schema})
		require.NoError(t, err)
	}

	start := make(chan struct{})
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			<-start
			errs[i] = s.Migrate(ctx)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker %d", i)
	}

	migrations, err := activity.Migrations(schema)
	require.NoError(t, err)
	var want []int
	for _, m := range migrations {
		want = append(want, m.Version)
	}
	rows, err := pgtest.Pool(t).Query(ctx, "SELECT version FROM "+pgx.Identifier{schema, "tempotent_migration"}.Sanitize()+" ORDER BY version")
	require.NoError(t, err)
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, want, applied, "each migration applied once")
}
