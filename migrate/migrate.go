package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tempotent/tempotent/internal/schema"
)

// SchemaDefault is the Postgres schema that a function of this package uses when given "": the
// same as activity.Config's default (Config.WithDefaults), outbox.SchemaDefault and
// inbox.SchemaDefault.
const SchemaDefault = "tempotent"

// ErrNotMigrated is matched by Check's error when a schema lacks migrations, and by the errors of
// the outbox's and the inbox's statements and of the operator's receipt queries when they meet a
// table that does not exist yet; it is this error's one name (outbox.ErrNotMigrated and
// inbox.ErrNotMigrated are deprecated aliases of it).
var ErrNotMigrated = schema.ErrNotMigrated

// Migration is one numbered schema change, with its SQL rendered for a schema.
type Migration struct {
	// Version is the migration's number, from 1; the sequence has no gaps.
	Version int
	// Name says what it changes, such as "messages".
	Name string
	// Up applies it. Run it in a transaction together with the migration's row in the schema's
	// tempotent_migration table (Script writes both), or Check and Up do not know it is applied.
	Up string
	// Down undoes it, for a migration tool that can go back; Up never runs it.
	Down string
}

// String names the migration as its files do, such as "003_messages".
func (m Migration) String() string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

// DB is what Up, Check and Missing need of a database: *pgxpool.Pool and *pgx.Conn have it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// List returns every migration in version order, with SQL rendered for schema ("" means
// SchemaDefault): the receipts of package activity and the tables of outbox, inbox and
// webhook. It is for a migration tool of your own; Script renders the same migrations as one
// script, each with the row that tells Check it is applied.
func List(schemaName string) ([]Migration, error) {
	migrations, err := schema.Migrations(cmp.Or(schemaName, SchemaDefault))
	return convert(migrations), err
}

// Up creates the schema ("" means SchemaDefault) if it does not exist and applies the migrations
// it lacks, in version order, each in a transaction of its own together with its row in the
// schema's tempotent_migration table. It is safe to call again, and from many processes at once
// (workers starting together): a transaction-scoped advisory lock on the schema's name makes them
// take turns, and each re-checks what is applied once it holds the lock, so every migration is
// applied once. A migration that fails rolls back alone; the ones before it stay applied, and the
// error names it.
//
// When the schema has every migration, Up changes nothing and needs no right to change it: a
// worker connected as the runtime role of Grants may call it at every start. When a migration is
// missing, Up must run as the schema's owner; under a role without the right, its error says so,
// and wraps Postgres' (a *pgconn.PgError of code 42501, insufficient_privilege).
func Up(ctx context.Context, db DB, schemaName string) error {
	schemaName = cmp.Or(schemaName, SchemaDefault)
	// Read first, outside the migrators' lock: a migration once applied stays applied, so
	// nothing missing now means nothing to do. Were the check skipped, a role that may not
	// create schemas would fail on CREATE SCHEMA IF NOT EXISTS of a schema that is there.
	if missing, err := schema.Missing(ctx, db, schemaName); err == nil && len(missing) == 0 {
		return nil
	}
	err := schema.Migrate(ctx, db, schemaName)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == insufficientPrivilege {
		return fmt.Errorf("%w: migrations change the schema, so they run as its owner: run tempotent migrate (migrate.Up, the worker's -migrate) "+
			"with the owner's DATABASE_URL, and give this role the grants of tempotent migrate --print-grants ROLE (migrate.Grants), "+
			"under which Up changes nothing once the schema is migrated", err)
	}
	return err
}

// insufficientPrivilege is Postgres' SQLSTATE for "permission denied".
const insufficientPrivilege = "42501"

// Check reports whether the schema ("" means SchemaDefault) has every migration this version of
// the toolkit needs, so that a process can refuse to start against an old schema rather than
// fail later. When the database answered, its error matches ErrNotMigrated and names the missing
// migrations and how to apply them; otherwise it is the connection's error. Check only reads.
func Check(ctx context.Context, db DB, schemaName string) error {
	return schema.Check(ctx, db, cmp.Or(schemaName, SchemaDefault))
}

// Missing returns the migrations that the schema ("" means SchemaDefault) lacks, in version
// order: all of them when the schema or its tempotent_migration table does not exist, none when
// it is up to date. An error means the database did not answer.
func Missing(ctx context.Context, db DB, schemaName string) ([]Migration, error) {
	migrations, err := schema.Missing(ctx, db, cmp.Or(schemaName, SchemaDefault))
	return convert(migrations), err
}

// Script renders the migrations after version after (0 for all) as one SQL script for the schema
// ("" means SchemaDefault), for a migration tool of your own: it creates the schema and its
// tempotent_migration table if they do not exist, then applies each migration in a transaction of
// its own together with its row in that table, so that Check and a later Up find it applied. It
// is what the command tempotent migrate --print writes.
func Script(schemaName string, after int) (string, error) {
	return schema.Script(cmp.Or(schemaName, SchemaDefault), after)
}

func convert(in []schema.Migration) []Migration {
	if in == nil {
		return nil
	}
	out := make([]Migration, len(in))
	for i, m := range in {
		out[i] = Migration(m)
	}
	return out
}
