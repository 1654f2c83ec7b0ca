package migrate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// examplePool connects to TEST_DATABASE_URL (or the local default) and drops schema now and in
// the returned cleanup.
func examplePool(ctx context.Context, schema string) (*pgxpool.Pool, func()) {
	pool, err := pgxpool.New(ctx, pgtest.URL())
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	return pool, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	}
}

// A process that may not change the schema checks it, and refuses to start against one that
// lacks migrations; Up applies them, and is safe to run again (and from every worker at once).
func ExampleUp() {
	ctx := context.Background()
	pool, cleanup := examplePool(ctx, "example_migrate")
	defer cleanup()

	err := migrate.Check(ctx, pool, "example_migrate")
	fmt.Println(errors.Is(err, migrate.ErrNotMigrated))

	for range 2 {
		if err := migrate.Up(ctx, pool, "example_migrate"); err != nil {
			panic(err)
		}
	}
	fmt.Println(migrate.Check(ctx, pool, "example_migrate"))
	// Output:
	// true
	// <nil>
}

// Missing says which migrations a schema lacks, named as their files.
func ExampleMissing() {
	ctx := context.Background()
	pool, cleanup := examplePool(ctx, "example_migrate_missing")
	defer cleanup()

	missing, err := migrate.Missing(ctx, pool, "example_migrate_missing")
	if err != nil {
		panic(err)
	}
	fmt.Println(missing[0], missing[1])
	// Output: 001_receipts 002_reservation_identity
}

// List gives the migrations, with their SQL rendered for a schema, to a migration tool of your
// own; "" is SchemaDefault.
func ExampleList() {
	migrations, err := migrate.List("")
	if err != nil {
		panic(err)
	}
	first := migrations[0]
	fmt.Println(first.Version, first.Name, first)
	// Output: 1 receipts 001_receipts
}
