package activity

import (
	"cmp"
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
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change, rendered for a schema. Migrations returns them for
// teams that apply SQL with their own migration tool instead of Store.Migrate.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Migrations returns every migration in version order, with SQL rendered for schema (""
// means SchemaDefault). Apply each Up in its own transaction.
func Migrations(schema string) ([]Migration, error) {
	quoted := pgx.Identifier{cmp.Or(schema, SchemaDefault)}.Sanitize()
	entries, err := fs.Glob(migrationFiles, "migrations/*.up.sql")
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
		upSQL, err := migrationFiles.ReadFile(up)
		if err != nil {
			return nil, err
		}
		downSQL, err := migrationFiles.ReadFile(strings.TrimSuffix(up, ".up.sql") + ".down.sql")
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

// Migrate creates the store's schema if needed and applies the migrations it has not applied yet,
// each in its own transaction together with its row in the schema's tempotent_migration table.
// It is safe to run from many workers at once: a transaction-scoped advisory lock makes them take
// turns, and each re-checks what is applied once it holds the lock.
func (s *Store) Migrate(ctx context.Context) error {
	migrations, err := Migrations(s.cfg.Schema)
	if err != nil {
		return err
	}
	schema := pgx.Identifier{s.cfg.Schema}.Sanitize()
	for _, m := range migrations {
		err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
			// Serialises concurrent migrators of this schema; released at commit.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('tempotent.migrate.' || $1))", s.cfg.Schema); err != nil {
				return err
			}
			// Under the lock: two CREATE SCHEMA IF NOT EXISTS of a schema that does not exist
			// yet race, and the loser fails on pg_namespace's unique index (23505) or with 42P06.
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
				return fmt.Errorf("create schema: %w", err)
			}
			if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+schema+`.tempotent_migration (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var applied bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+schema+".tempotent_migration WHERE version = $1)", m.Version).Scan(&applied); err != nil {
				return err
			}
			if applied {
				return nil
			}
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+schema+".tempotent_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s: apply %03d_%s: %w", schema, m.Version, m.Name, err)
		}
	}
	return nil
}

// ErrNotMigrated is matched by Check's error when the store's schema lacks migrations.
var ErrNotMigrated = errors.New("receipt store not migrated")

// Check reports whether the store's schema has every migration this version needs, so that a
// worker can refuse to start (rather than fail each activity) against an unmigrated database. Its
// error says which migrations are missing and how to apply them; it matches ErrNotMigrated when
// the database answered, and is a connection error otherwise.
func (s *Store) Check(ctx context.Context) error {
	migrations, err := Migrations(s.cfg.Schema)
	if err != nil {
		return err
	}
	var applied []int
	table := pgx.Identifier{s.cfg.Schema, "tempotent_migration"}.Sanitize()
	var exists bool
	if err := s.db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return fmt.Errorf("check the receipt store's schema %q: %w", s.cfg.Schema, err)
	}
	if exists {
		rows, err := s.db.Query(ctx, "SELECT version FROM "+table)
		if err != nil {
			return fmt.Errorf("check the receipt store's schema %q: %w", s.cfg.Schema, err)
		}
		if applied, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
			return fmt.Errorf("check the receipt store's schema %q: %w", s.cfg.Schema, err)
		}
	}
	var missing []string
	for _, m := range migrations {
		if !slices.Contains(applied, m.Version) {
			missing = append(missing, fmt.Sprintf("%03d_%s", m.Version, m.Name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: schema %q lacks migrations %s: call Store.Migrate (the worker's -migrate flag, TEMPOTENT_MIGRATE=1), or apply activity.Migrations with your migration tool",
			ErrNotMigrated, s.cfg.Schema, strings.Join(missing, ", "))
	}
	return nil
}
