package shard

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The directory: one row naming the default shard, and one row per tenant that is not on it
// (or is being moved). A tenant's row is written only by the move command, in the steps
// Move documents.
const directorySQL = `
CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE IF NOT EXISTS %[1]s.directory (
    one           boolean PRIMARY KEY DEFAULT true CHECK (one),
    default_shard text    NOT NULL
);
CREATE TABLE IF NOT EXISTS %[1]s.tenants (
    tenant     text        PRIMARY KEY,
    shard      text        NOT NULL,
    -- set from a move's fence to its switch: the tenant's calls are refused meanwhile.
    moving_to  text,
    fenced_at  timestamptz,
    reason     text,
    moved_by   text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((moving_to IS NULL) = (fenced_at IS NULL))
);
-- every move that switched: who, why, when, how many receipts.
CREATE TABLE IF NOT EXISTS %[1]s.moves (
    tenant      text        NOT NULL,
    from_shard  text        NOT NULL,
    to_shard    text        NOT NULL,
    fenced_at   timestamptz NOT NULL,
    switched_at timestamptz NOT NULL DEFAULT now(),
    copied      bigint      NOT NULL,
    moved_by    text        NOT NULL,
    reason      text        NOT NULL
);`

// lookupSQL reads a tenant's shard in one statement: the default, and the tenant's row if it
// has one. No row at all means the directory has no default yet.
func lookupSQL(schema string) string {
	return fmt.Sprintf(`SELECT d.default_shard, coalesce(t.shard, d.default_shard), coalesce(t.moving_to, '')
FROM %[1]s.directory d LEFT JOIN %[1]s.tenants t ON t.tenant = $1`, pgx.Identifier{schema}.Sanitize())
}

// Migrate creates the directory in schema on db if it is missing and records defaultShard as
// its default shard if it has none; a directory whose default is another shard is an error
// (changing the default would move every tenant it covers at once, without a drain). It is
// what Router.Migrate runs; the move command runs it too.
func Migrate(ctx context.Context, db *pgxpool.Pool, schema, defaultShard string) error {
	if err := validName(defaultShard); err != nil {
		return fmt.Errorf("shard.Migrate: default shard: %w", err)
	}
	if schema == "" {
		return errors.New("shard.Migrate: the schema is empty; use shard.SchemaDefault")
	}
	q := pgx.Identifier{schema}.Sanitize()
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Two workers starting at once would both try to create the tables: one waits here.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('tempotent_shard.migrate'))"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(directorySQL, q)); err != nil {
			return fmt.Errorf("shard.Migrate: create the directory in schema %s: %w", schema, err)
		}
		var def string
		err := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s.directory (default_shard) VALUES ($1)
ON CONFLICT (one) DO UPDATE SET one = true RETURNING default_shard`, q), defaultShard).Scan(&def)
		if err != nil {
			return fmt.Errorf("shard.Migrate: %w", err)
		}
		if def != defaultShard {
			return fmt.Errorf("shard.Migrate: the directory's default shard is %q, not %q; configure every worker with the directory's default", def, defaultShard)
		}
		return nil
	})
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// validName checks a shard's name: what the directory records and the move command is given.
func validName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("shard name %q: use 1 to 63 lower-case letters, digits, '_', '.' or '-', beginning with a letter or digit", name)
	}
	return nil
}
