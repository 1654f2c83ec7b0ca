package activity

import (
	"context"

	"github.com/tempotent/tempotent/migrate"
)

// Migrate applies the migrations that the store's schema lacks: migrate.Up for Config.Schema,
// which creates every table of the toolkit (receipts, outbox, inbox), each migration in its own
// transaction together with its row in the schema's tempotent_migration table. It is safe to run
// from many workers at once: a transaction-scoped advisory lock makes them take turns, and each
// re-checks what is applied once it holds the lock.
func (s *Store) Migrate(ctx context.Context) error {
	return migrate.Up(ctx, s.db, s.cfg.Schema)
}

// Check reports whether the store's schema has every migration this version needs
// (migrate.Check for Config.Schema), so that a worker can refuse to start, rather than fail each
// activity, against an unmigrated database. Its error says which migrations are missing and how
// to apply them; it matches migrate.ErrNotMigrated when the database answered, and is a
// connection error otherwise.
func (s *Store) Check(ctx context.Context) error {
	return migrate.Check(ctx, s.db, s.cfg.Schema)
}
