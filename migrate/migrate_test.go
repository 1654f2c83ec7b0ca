package migrate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// newSchemaName returns the name of a schema that does not exist yet, dropped when t ends.
func newSchemaName(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test_migrate_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, _ = pgtest.Pool(t).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// applied returns the versions in the schema's tempotent_migration table, in order.
func applied(t *testing.T, schema string) []int {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT version FROM "+pgx.Identifier{schema, "tempotent_migration"}.Sanitize()+" ORDER BY version")
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return versions
}

// versions returns every migration's version, in order.
func versions(t *testing.T) []int {
	t.Helper()
	migrations, err := migrate.List("")
	require.NoError(t, err)
	var out []int
	for _, m := range migrations {
		out = append(out, m.Version)
	}
	return out
}

// TestUpConcurrent starts many workers' Up on a database where the schema does not exist yet,
// each with its own pool, as separate processes would, and requires every Up to succeed and every
// migration to be applied once. Two unserialised CREATE SCHEMA IF NOT EXISTS of a new schema race
// in Postgres: one fails with 23505 or 42P06. Up again afterwards changes nothing.
func TestUpConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := newSchemaName(t) // created by Up, not by the test

	const workers = 8
	pools := make([]*pgxpool.Pool, workers)
	for i := range pools {
		pool, err := pgxpool.New(ctx, pgtest.URL())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		require.NoError(t, pool.Ping(ctx)) // connected before the start, so that all start together
		pools[i] = pool
	}

	start := make(chan struct{})
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() {
			<-start
			errs[i] = migrate.Up(ctx, pool, schema)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker %d", i)
	}
	require.Equal(t, versions(t), applied(t, schema), "each migration applied once")

	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), schema))
	require.Equal(t, versions(t), applied(t, schema), "Up again applied something again")
	require.NoError(t, migrate.Check(ctx, pgtest.Pool(t), schema))
}

// TestCheckOldSchema checks a schema that a previous release migrated (its last migration undone,
// as it was before that migration existed): Check refuses it with ErrNotMigrated, naming the
// missing migration and how to apply it, Missing returns just that one, and Up applies it.
func TestCheckOldSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pool, schema))

	migrations, err := migrate.List(schema)
	require.NoError(t, err)
	last := migrations[len(migrations)-1]
	_, err = pool.Exec(ctx, last.Down)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, "tempotent_migration"}.Sanitize()+" WHERE version = $1", last.Version)
	require.NoError(t, err)

	err = migrate.Check(ctx, pool, schema)
	require.ErrorIs(t, err, migrate.ErrNotMigrated)
	require.ErrorContains(t, err, "lacks migrations "+last.String()+":")
	require.ErrorContains(t, err, "migrate.Up")
	missing, err := migrate.Missing(ctx, pool, schema)
	require.NoError(t, err)
	require.Equal(t, []migrate.Migration{last}, missing)

	// The store and the worker check through the same function.
	s, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	require.NoError(t, err)
	require.ErrorIs(t, s.Check(ctx), migrate.ErrNotMigrated)

	require.NoError(t, migrate.Up(ctx, pool, schema))
	require.NoError(t, migrate.Check(ctx, pool, schema))
	require.NoError(t, s.Check(ctx))
	missing, err = migrate.Missing(ctx, pool, schema)
	require.NoError(t, err)
	require.Empty(t, missing)
}

// TestCheckUnmigrated checks a schema that does not exist: every migration is missing, and
// Check and the outbox's and inbox's errors are one ErrNotMigrated.
func TestCheckUnmigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := newSchemaName(t)
	err := migrate.Check(ctx, pgtest.Pool(t), schema)
	require.ErrorIs(t, err, migrate.ErrNotMigrated)
	//lint:ignore SA1019 the deprecated aliases must keep matching until they are removed
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	//lint:ignore SA1019 the deprecated aliases must keep matching until they are removed
	require.ErrorIs(t, err, inbox.ErrNotMigrated)
	require.ErrorContains(t, err, "001_receipts, 002_reservation_identity")
	missing, err := migrate.Missing(ctx, pgtest.Pool(t), schema)
	require.NoError(t, err)
	all, err := migrate.List(schema)
	require.NoError(t, err)
	require.Equal(t, all, missing)
}

// A database that does not answer is not an unmigrated one: Check's error is the connection's.
func TestCheckDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := migrate.Check(ctx, pgtest.Pool(t), pgtest.Schema(t))
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, migrate.ErrNotMigrated)
	_, err = migrate.Missing(ctx, pgtest.Pool(t), "")
	require.ErrorIs(t, err, context.Canceled)
}

// TestList checks the sequence: numbered from 1 without gaps, named as its files, and rendered
// for the schema given ("" is SchemaDefault, the schema every package defaults to).
func TestList(t *testing.T) {
	t.Parallel()
	migrations, err := migrate.List(`odd"name`)
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version, "the sequence has a gap")
		require.NotEmpty(t, m.Name)
		require.Contains(t, m.Up, `"odd""name".`, "%s: Up is not rendered for the schema", m)
		require.Contains(t, m.Down, `"odd""name".`, "%s: Down is not rendered for the schema", m)
		require.NotContains(t, m.Up+m.Down, "{{schema}}")
	}
	require.Equal(t, "001_receipts", migrations[0].String())

	defaults, err := migrate.List("")
	require.NoError(t, err)
	require.Contains(t, defaults[0].Up, `"tempotent".receipts`)
	for _, other := range []string{new(activity.Config).WithDefaults().Schema, outbox.SchemaDefault, inbox.SchemaDefault} {
		require.Equal(t, migrate.SchemaDefault, other)
	}
}

// TestScript applies what Script writes, as a migration tool of the user's own would: the
// schema then passes Check, and Up finds nothing to do. A script of the migrations after a
// version holds only those.
func TestScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := newSchemaName(t)
	script, err := migrate.Script(schema, 0)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, script) // no arguments: the simple protocol, many statements
	require.NoError(t, err)
	require.NoError(t, migrate.Check(ctx, pgtest.Pool(t), schema))
	require.Equal(t, versions(t), applied(t, schema))
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), schema))
	require.Equal(t, versions(t), applied(t, schema))

	all := versions(t)
	last, err := migrate.Script(schema, all[len(all)-2])
	require.NoError(t, err)
	migrations, err := migrate.List(schema)
	require.NoError(t, err)
	for _, m := range migrations {
		require.Equal(t, m.Version == all[len(all)-1], strings.Contains(last, "-- "+m.String()+"\n"), "%s", m)
	}
}
