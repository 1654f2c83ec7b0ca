// Package schema holds tempotent's tables as one numbered sequence of migrations, rendered for a
// schema, and applies or checks them. The receipts, the outbox and the inbox live in the same
// schema and share the sequence, so one Migrate makes everything the toolkit needs. Package
// migrate is its public face (migrate.Up, migrate.Check, migrate.List); Explain is for the
// packages whose statements meet a missing table.
package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var files embed.FS

// Migration is one numbered schema change, rendered for a schema. migrate.Migration has the same
// fields, so that one converts to the other.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// DB is what Migrate and Check need of a pool or a connection.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Migrations returns every migration in version order, with SQL rendered for schema.
func Migrations(schema string) ([]Migration, error) {
	quoted := pgx.Identifier{schema}.Sanitize()
	entries, err := fs.Glob(files, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, up := range entries {
		base := strings.TrimSuffix(path.Base(up), ".up.sql")
		num, name, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: file name must start with its number: %w", up, err)
		}
		upSQL, err := files.ReadFile(up)
		if err != nil {
			return nil, err
		}
		downSQL, err := files.ReadFile(strings.TrimSuffix(up, ".up.sql") + ".down.sql")
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{
			Version: version,
			Name:    name,
			Up:      strings.ReplaceAll(string(upSQL), "{{schema}}", quoted),
			Down:    strings.ReplaceAll(string(downSQL), "{{schema}}", quoted),
		})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// Script renders the migrations after version after as one SQL script, for a migration tool of
// the user's own: the schema and the bookkeeping table first, then each migration in a
// transaction of its own together with its row in tempotent_migration, so that Check (and a
// later Migrate) find it applied.
func Script(schema string, after int) (string, error) {
	migrations, err := Migrations(schema)
	if err != nil {
		return "", err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- tempotent's migrations for schema %s. Apply in order; each is one transaction.\n", quoted)
	fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", quoted)
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.tempotent_migration (\n\tversion    integer     PRIMARY KEY,\n\tname       text        NOT NULL,\n\tapplied_at timestamptz NOT NULL DEFAULT now());\n", quoted)
	for _, m := range migrations {
		if m.Version <= after {
			continue
		}
		fmt.Fprintf(&b, "\n-- %03d_%s\nBEGIN;\n%s\nINSERT INTO %s.tempotent_migration (version, name) VALUES (%d, '%s');\nCOMMIT;\n",
			m.Version, m.Name, strings.TrimSpace(m.Up), quoted, m.Version, m.Name)
	}
	return b.String(), nil
}

// Migrate creates schema if needed and applies the migrations it has not applied yet, each in
// its own transaction together with its row in the schema's tempotent_migration table. It is
// safe to run from many processes at once: a transaction-scoped advisory lock makes them take
// turns, and each re-checks what is applied once it holds the lock.
func Migrate(ctx context.Context, db DB, schema string) error {
	migrations, err := Migrations(schema)
	if err != nil {
		return err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	for _, m := range migrations {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// Serialises concurrent migrators of this schema; released at commit.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('tempotent.migrate.' || $1))", schema); err != nil {
				return err
			}
			// Under the lock: two CREATE SCHEMA IF NOT EXISTS of a schema that does not exist
			// yet race, and the loser fails on pg_namespace's unique index (23505) or with 42P06.
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quoted); err != nil {
				return fmt.Errorf("create schema: %w", err)
			}
			if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+quoted+`.tempotent_migration (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var applied bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+quoted+".tempotent_migration WHERE version = $1)", m.Version).Scan(&applied); err != nil {
				return err
			}
			if applied {
				return nil
			}
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+quoted+".tempotent_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s: apply %03d_%s: %w", quoted, m.Version, m.Name, err)
		}
	}
	return nil
}

// howToMigrate is what every "not migrated" error tells the user to do.
const howToMigrate = "apply tempotent's migrations with migrate.Up (activity.Store.Migrate, the worker's -migrate flag or TEMPOTENT_MIGRATE=1, the command tempotent migrate), or with your own tool from migrate.List or tempotent migrate --print"

// Check reports whether schema has every migration this version needs. Its error matches
// ErrNotMigrated and names the missing migrations and how to apply them when the database
// answered, and is the connection's error otherwise.
func Check(ctx context.Context, db DB, schema string) error {
	missing, err := Missing(ctx, db, schema)
	if err != nil {
		return fmt.Errorf("check schema %q: %w", schema, err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: schema %q lacks migrations %s: %s", ErrNotMigrated, schema, Names(missing), howToMigrate)
	}
	return nil
}

// Names lists migrations as "002_reservation_identity, 003_messages".
func Names(migrations []Migration) string {
	names := make([]string, len(migrations))
	for i, m := range migrations {
		names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	return strings.Join(names, ", ")
}

// Missing returns the migrations that schema lacks, in version order. An error means the
// database did not answer.
func Missing(ctx context.Context, db DB, schema string) ([]Migration, error) {
	migrations, err := Migrations(schema)
	if err != nil {
		return nil, err
	}
	var applied []int
	table := pgx.Identifier{schema, "tempotent_migration"}.Sanitize()
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		rows, err := db.Query(ctx, "SELECT version FROM "+table)
		if err != nil {
			return nil, err
		}
		if applied, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
			return nil, err
		}
	}
	var missing []Migration
	for _, m := range migrations {
		if !slices.Contains(applied, m.Version) {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

// ErrNotMigrated is matched by the errors that Explain turns a missing table into.
var ErrNotMigrated = errors.New("tempotent's tables are missing")

// Explain turns Postgres' "relation does not exist" (42P01) into an error that says what to do,
// matching ErrNotMigrated; other errors pass through.
func Explain(err error, schema string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w in schema %q (%v): %s", ErrNotMigrated, schema, err, howToMigrate)
	}
	return err
}
