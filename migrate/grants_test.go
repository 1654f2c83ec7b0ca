package migrate_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// runtimeModel is what the runtime role may do on each table, written out apart from
// migrate.Grants: every table the migrations create must be here (TestGrantsAreExact fails on
// one that is not), and a table's privileges are exactly these.
var runtimeModel = map[string][]string{
	"tempotent_migration": {"SELECT"},
	"receipts":            {"SELECT", "INSERT", "UPDATE", "DELETE"},
	"outbox":              {"SELECT", "INSERT", "UPDATE", "DELETE"},
	"inbox":               {"SELECT", "INSERT", "UPDATE", "DELETE"},
	"inbox_versions":      {"SELECT", "INSERT", "UPDATE"},
	"webhook_endpoints":   {"SELECT", "INSERT"},
	"audit":               {"SELECT", "INSERT"},
	"maintenance_runs":    {"SELECT", "INSERT", "UPDATE"},
	"webhook_tallies":     {"SELECT", "INSERT", "UPDATE", "DELETE"},
	"tenant_fences":       {"SELECT", "INSERT", "UPDATE", "DELETE"},
}

// runtimeFunctionsModel are the functions the runtime role may execute, by name: every function
// the migrations create must be here (TestGrantsAreExact).
var runtimeFunctionsModel = map[string]bool{"tenant_moved": true, "tenant_fences_read_committed": true}

// runtimeRole migrates a fresh schema as the owner, creates a role, applies the role's grants as
// the owner and returns the schema, the role and a pool connected as the role.
func runtimeRole(t *testing.T) (schema, role string, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	schema = pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), schema))
	role = pgtest.Role(t)
	grants, err := migrate.Grants(schema, role)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, grants)
	require.NoError(t, err)
	return schema, role, pgtest.PoolAs(t, role)
}

// The role holds exactly the model's privileges on every table of the schema, none on its
// sequences, and USAGE without CREATE on the schema — also when it held more before the grants
// were applied, and when they are applied twice.
func TestGrantsAreExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := pgtest.Pool(t)
	schema, role, _ := runtimeRole(t)
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	// A role that was given too much, as a first deployment might have done; and a database
	// hardened so that PUBLIC executes none of the schema's functions: the role's own grants must
	// cover what its statements call.
	_, err := owner.Exec(ctx, "GRANT ALL ON SCHEMA "+s+" TO "+r+"; GRANT ALL ON ALL TABLES IN SCHEMA "+s+" TO "+r+
		"; GRANT ALL ON ALL SEQUENCES IN SCHEMA "+s+" TO "+r+"; REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA "+s+" FROM PUBLIC")
	require.NoError(t, err)
	grants, err := migrate.Grants(schema, role)
	require.NoError(t, err)
	for range 2 {
		_, err = owner.Exec(ctx, grants)
		require.NoError(t, err)
	}

	rows, err := owner.Query(ctx, `SELECT c.relname, c.relkind = 'S' FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'S') ORDER BY 1`, s)
	require.NoError(t, err)
	type rel struct {
		name     string
		sequence bool
	}
	rels, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rel, error) {
		var x rel
		return x, row.Scan(&x.name, &x.sequence)
	})
	require.NoError(t, err)
	tables := 0
	for _, x := range rels {
		qualified := s + "." + pgx.Identifier{x.name}.Sanitize()
		if x.sequence {
			var usage bool
			require.NoError(t, owner.QueryRow(ctx, "SELECT has_sequence_privilege($1, $2, 'USAGE, SELECT, UPDATE')", role, qualified).Scan(&usage))
			require.False(t, usage, "the role has a privilege on sequence %s", x.name)
			continue
		}
		tables++
		want, ok := runtimeModel[x.name]
		require.True(t, ok, "table %s is not in the runtime model: a migration added it; give it its grants in migrate.Grants", x.name)
		for _, privilege := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
			var has bool
			require.NoError(t, owner.QueryRow(ctx, "SELECT has_table_privilege($1, $2, $3)", role, qualified, privilege).Scan(&has))
			require.Equal(t, strings.Contains(strings.Join(want, ","), privilege), has, "%s on %s", privilege, x.name)
		}
	}
	require.Len(t, runtimeModel, tables, "a table of the model is not in the schema")
	var usage, create bool
	require.NoError(t, owner.QueryRow(ctx, "SELECT has_schema_privilege($1, $2, 'USAGE'), has_schema_privilege($1, $2, 'CREATE')", role, schema).Scan(&usage, &create))
	require.True(t, usage)
	require.False(t, create, "the role may create in the schema")

	functions := 0
	rows, err = owner.Query(ctx, `SELECT p.proname, has_function_privilege($2, p.oid, 'EXECUTE') FROM pg_proc p
		WHERE p.pronamespace = $1::regnamespace ORDER BY 1`, s, role)
	require.NoError(t, err)
	var name string
	var execute bool
	_, err = pgx.ForEachRow(rows, []any{&name, &execute}, func() error {
		functions++
		require.True(t, runtimeFunctionsModel[name], "function %s is not in the runtime model: a migration added it; grant it in migrate.Grants", name)
		require.True(t, execute, "the role may not execute %s", name)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, runtimeFunctionsModel, functions, "a function of the model is not in the schema")
}

// Under the grants, the role reads and writes rows and can change nothing else: no DDL in the
// schema, no TRUNCATE, no change to the audit log's records, not its identity sequence.
func TestRuntimeRoleIsRefusedWhatItDoesNotNeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, _, pool := runtimeRole(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }

	// What it may do, so that the refusals below are refusals of the statement and not of the
	// role reaching nothing at all.
	_, err := pool.Exec(ctx, "INSERT INTO "+table("audit")+" (actor, action, target, reason) VALUES ('test', 'probe', 'x', 'a refusal test')")
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table("audit")).Scan(&n))
	require.Equal(t, 1, n)
	_, err = pool.Exec(ctx, "INSERT INTO "+table("webhook_endpoints")+" (source, topic) VALUES ('stripe', 'payments')")
	require.NoError(t, err)

	for _, stmt := range []string{
		"CREATE TABLE " + table("mine") + " (id int)",
		"CREATE INDEX mine_idx ON " + table("receipts") + " (tenant)",
		"CREATE FUNCTION " + table("mine") + "() RETURNS int LANGUAGE sql AS 'SELECT 1'",
		"CREATE VIEW " + table("mine") + " AS SELECT 1",
		"DROP TABLE " + table("receipts"),
		"DROP TABLE " + table("audit"),
		"DROP INDEX " + table("receipts_token_idx"),
		"TRUNCATE " + table("outbox"),
		"TRUNCATE " + table("receipts"),
		"ALTER TABLE " + table("receipts") + " ADD COLUMN mine text",
		"ALTER TABLE " + table("audit") + " RENAME TO old_audit",
		"ALTER TABLE " + table("outbox") + " DISABLE TRIGGER ALL",
		"UPDATE " + table("audit") + " SET reason = 'rewritten'",
		"DELETE FROM " + table("audit"),
		"UPDATE " + table("webhook_endpoints") + " SET topic = 'elsewhere'",
		"DELETE FROM " + table("webhook_endpoints"),
		"DELETE FROM " + table("inbox_versions"),
		"DELETE FROM " + table("maintenance_runs"),
		"TRUNCATE " + table("maintenance_runs"),
		"INSERT INTO " + table("tempotent_migration") + " (version, name) VALUES (999, 'mine')",
		"DELETE FROM " + table("tempotent_migration"),
		"SELECT nextval('" + table("audit_id_seq") + "')",
	} {
		_, err := pool.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "the runtime role ran %s", stmt)
		require.Equal(t, "42501", pgErr.Code, "%s: %v", stmt, err) // insufficient_privilege, "must be owner" too
	}
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table("audit")+" WHERE reason = 'a refusal test'").Scan(&n))
	require.Equal(t, 1, n, "the audit record changed")
}

// Up under the runtime role: nothing to do once the owner has migrated, so it succeeds (a worker
// may keep TEMPOTENT_MIGRATE=1); a missing migration it cannot apply, and says who can, leaving
// the schema as it was.
func TestUpUnderRuntimeRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, _, pool := runtimeRole(t)
	require.NoError(t, migrate.Up(ctx, pool, schema), "Up failed under the runtime role on a migrated schema")

	// The schema as the previous release left it: its last migration undone.
	migrations, err := migrate.List(schema)
	require.NoError(t, err)
	last := migrations[len(migrations)-1]
	_, err = pgtest.Pool(t).Exec(ctx, last.Down+"; DELETE FROM "+pgx.Identifier{schema, "tempotent_migration"}.Sanitize()+" WHERE version = "+strconv.Itoa(last.Version))
	require.NoError(t, err)
	err = migrate.Up(ctx, pool, schema)
	requirePrivilegeExplained(t, err)
	all := versions(t)
	require.Equal(t, all[:len(all)-1], applied(t, schema))

	// A schema that does not exist: the role may not create it either.
	err = migrate.Up(ctx, pool, newSchemaName(t))
	requirePrivilegeExplained(t, err)
	require.ErrorContains(t, err, "permission denied for database")

	// The owner's Up applies it, and the role's grants still hold for the other tables.
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), schema))
	require.NoError(t, migrate.Check(ctx, pool, schema))
}

// requirePrivilegeExplained requires err to be Up's refusal for want of privilege: Postgres' error,
// and what to do.
func requirePrivilegeExplained(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code)
	require.ErrorContains(t, err, "run as its owner")
	require.ErrorContains(t, err, "tempotent migrate --print-grants ROLE")
}

func TestGrantsRefusesNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 64)
	for _, tc := range []struct {
		name, schema, role, what, problem string
	}{
		{name: "EmptyRole", role: "", what: "role", problem: "is empty"},
		{name: "Public", role: "public", what: "role", problem: "every role"},
		{name: "None", role: "none", what: "role", problem: "reserved"},
		{name: "PredefinedRole", role: "pg_write_server_files", what: "role", problem: "begins with pg_"},
		{name: "LongRole", role: long, what: "role", problem: "64 bytes long"},
		{name: "NULInRole", role: "app\x00", what: "role", problem: "NUL byte"},
		{name: "InvalidUTF8Role", role: "app\xff", what: "role", problem: "invalid UTF-8"},
		{name: "LongSchema", schema: long, role: "app", what: "schema", problem: "64 bytes long"},
		{name: "SystemSchema", schema: "pg_catalog", role: "app", what: "schema", problem: "begins with pg_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sql, err := migrate.Grants(tc.schema, tc.role)
			var nameErr *migrate.NameError
			require.ErrorAs(t, err, &nameErr)
			require.Equal(t, tc.what, nameErr.What)
			require.Contains(t, nameErr.Problem, tc.problem)
			require.Empty(t, sql)
		})
	}
	// Names Postgres takes, however odd, are quoted, not refused.
	for _, role := range []string{"PUBLIC", "None", strings.Repeat("r", 63), `app"; DROP TABLE receipts; --`, "appli cation"} {
		sql, err := migrate.Grants("", role)
		require.NoError(t, err, role)
		require.Contains(t, sql, "TO "+pgx.Identifier{role}.Sanitize()+";")
	}
}

// The grants that docs/operating.md shows are what Grants prints.
func TestGrantsInTheDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operating.md")
	require.NoError(t, err)
	grants, err := migrate.Grants("", "tempotent_app")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(doc), grants),
		"docs/operating.md, \"Least privilege\", does not show what Grants prints: paste the output of tempotent migrate --print-grants tempotent_app:\n%s", grants)
}
