// Package migrate creates and upgrades tempotent's tables in Postgres: the receipts of package
// activity and the outbox, inbox and webhook tables, which live in one schema and share one
// numbered sequence of migrations, one version table (tempotent_migration) and one advisory lock.
//
// Apply them when a worker starts, or from a deploy step, before anything uses the tables:
//
//	if err := migrate.Up(ctx, pool, ""); err != nil { // "" is SchemaDefault, "tempotent"
//		return err
//	}
//
// Up is safe to run from every worker at once and to run again: each migration is applied once,
// in its own transaction with its version row. activity.Store.Migrate, the worker's -migrate
// flag (TEMPOTENT_MIGRATE=1) and the command tempotent migrate call it.
//
// A process that should not change the schema itself checks it instead, and refuses to start
// against an old one:
//
//	if err := migrate.Check(ctx, pool, ""); errors.Is(err, migrate.ErrNotMigrated) {
//		// the error names the migrations that are missing and how to apply them
//	}
//
// To apply the SQL with a migration tool of your own, take the migrations from List, or the
// whole script from Script (tempotent migrate --print): run each migration in a transaction
// together with its row in tempotent_migration, so that Check and Up know it is applied. Some
// migrations say in a comment how to prepare them on a large table first.
//
// The role that migrates owns the tables. The workers need less: Grants writes the SQL that lets
// a role of their own read and write tempotent's rows and nothing more (no DDL, no TRUNCATE, an
// audit log it can only add to), for the owner to apply after migrating (tempotent migrate
// --print-grants ROLE prints it). Under that role Up does nothing once the schema is migrated,
// and says who may migrate it when it is not.
package migrate
