package activity

import (
	"cmp"
	"context"

	"github.com/tempotent/tempotent/internal/schema"
)

// Migration is one numbered schema change, rendered for a schema. Migrations returns them for
// teams that apply SQL with their own migration tool instead of Store.Migrate.
type Migration = schema.Migration

// Migrations returns every migration of tempotent's schema in version order, with SQL rendered
// for schema ("" means SchemaDefault): the receipts, and the outbox and inbox tables of the
// outbox, inbox and webhook packages. Apply each Up in its own transaction.
func Migrations(schemaName string) ([]Migration, error) {
	return schema.Migrations(cmp.Or(schemaName, SchemaDefault))
}

// Migrate creates the store's schema if needed and applies the migrations it has not applied yet
// (every table of the toolkit: receipts, outbox, inbox), each in its own transaction together
// with its row in the schema's tempotent_migration table. It is safe to run from many workers at
// once: a transaction-scoped advisory lock makes them take turns, and each re-checks what is
// applied once it holds the lock.
func (s *Store) Migrate(ctx context.Context) error {
	return schema.Migrate(ctx, s.db, s.cfg.Schema)
}

// ErrNotMigrated is matched by Check's error when the store's schema lacks migrations. It is the
// same error as outbox.ErrNotMigrated and inbox.ErrNotMigrated: one schema, one set of
// migrations.
var ErrNotMigrated = schema.ErrNotMigrated

// Check reports whether the store's schema has every migration this version needs, so that a
// worker can refuse to start (rather than fail each activity) against an unmigrated database. Its
// error says which migrations are missing and how to apply them; it matches ErrNotMigrated when
// the database answered, and is a connection error otherwise.
func (s *Store) Check(ctx context.Context) error {
	return schema.Check(ctx, s.db, s.cfg.Schema)
}
