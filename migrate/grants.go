package migrate

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Least privilege: the workers connect as a role of their own that reads and writes tempotent's
// rows and changes nothing else. Postgres lets no one but a table's owner ALTER, DROP or
// TRUNCATE it (TRUNCATE is a privilege, and it is not granted), so a role with these grants and
// no ownership cannot change the schema. Only partition maintenance is DDL (see Grants).

// tableGrant is what the runtime role may do on one of tempotent's tables, and which statements
// need it.
type tableGrant struct {
	table, privileges, why string
}

// runtimeGrants lists every table the migrations create, with the privileges the runtime's
// statements need on it, no more. TestGrantsCoverEveryTable fails when a migration adds a table
// that is not here.
var runtimeGrants = []tableGrant{
	{"tempotent_migration", "SELECT",
		"migrate.Check when a worker starts; Up, which changes nothing once the owner has migrated"},
	{"receipts", "SELECT, INSERT, UPDATE, DELETE",
		"attempts reserve, complete, release and extend receipts; Resolve and Rearm settle them; Purge deletes expired ones"},
	{"outbox", "SELECT, INSERT, UPDATE, DELETE",
		"Put inserts; dispatchers claim and mark; pruning and DiscardMessage delete"},
	{"inbox", "SELECT, INSERT, UPDATE, DELETE",
		"consumers and webhook intakes insert; purging deletes (its FOR UPDATE SKIP LOCKED needs UPDATE)"},
	{"inbox_versions", "SELECT, INSERT, UPDATE",
		"inbox.Newer raises an object's version; nothing deletes one"},
	{"webhook_endpoints", "SELECT, INSERT",
		"a webhook source's first delivery records its topic; moving a source to another topic is the owner's"},
	{"audit", "SELECT, INSERT",
		"the audit log is only added to: no UPDATE, no DELETE"},
	{"maintenance_runs", "SELECT, INSERT, UPDATE",
		"a purge round records its run over the last one (an UPSERT); nothing deletes one"},
	{"webhook_tallies", "SELECT, INSERT, UPDATE, DELETE",
		"webhook intakes add their counts (an upsert: INSERT, and UPDATE with SELECT of the count it adds to); the console reads them; purging deletes (FOR UPDATE SKIP LOCKED needs UPDATE)"},
	{"tenant_fences", "SELECT, INSERT, UPDATE, DELETE",
		"a sharded store's receipt statements read a tenant's fence; tempotent shard move writes it on the shard a tenant leaves and deletes it on the shard it joins"},
}

// functionGrant is a function of tempotent's that the runtime's statements call, with its
// argument types as GRANT names it, and which statements call it.
type functionGrant struct {
	function, args, why string
}

// runtimeFunctions lists every function the runtime role calls: EXECUTE on each, granted to the
// role itself, so that statements calling it work where PUBLIC's default EXECUTE was revoked.
// TestGrantsAreExact fails when a migration adds a function that is not here.
var runtimeFunctions = []functionGrant{
	{"tenant_moved", "text, text",
		"a sharded store's receipt statements refuse a tenant moved away from the shard with it (activity.Config.TenantFences)"},
	{"tenant_fences_read_committed", "",
		"a sharded store's receipt statements refuse to run outside READ COMMITTED with it"},
}

// maxName is the longest identifier Postgres keeps (NAMEDATALEN - 1 bytes); it cuts a longer one
// short, so that a grant would name another role than the one given.
const maxName = 63

// NameError is Grants' error for a role or schema name it will not write grants for. Nothing is
// written with it.
type NameError struct {
	// What is "role" or "schema".
	What string
	// Name is the name as given.
	Name string
	// Problem says what is wrong with it and what to do.
	Problem string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("migrate.Grants: %s name %q %s", e.What, e.Name, e.Problem)
}

// Grants returns the SQL that gives role exactly what tempotent's runtime needs on the schema
// ("" means SchemaDefault): USAGE on the schema, and on each table the row privileges its
// statements use — a worker's receipts, the outbox and its dispatchers, inbox consumers, webhook
// intakes and their tallies, the worker's purge of expired receipts, inbox records and tallies
// and its record of each round (maintenance_runs: no DELETE), and the operator's actions, which
// add to the audit log (SELECT and INSERT only there: the log is never changed). It grants
// no CREATE on the schema, no TRUNCATE, REFERENCES or TRIGGER, and nothing on sequences: an
// identity column's value needs no privilege on its sequence. It grants EXECUTE on the functions
// the runtime's statements call (a sharded store's tenant fences), to the role itself, so that
// they work where PUBLIC's default EXECUTE on functions was revoked. It is what tempotent migrate
// --print-grants ROLE prints.
//
// Run it as the schema's owner (the role that ran Up) in one go; it is one transaction. It first
// revokes everything the role holds on the schema, its tables and its sequences, so that running
// it again, or after an upgrade, leaves the role with exactly these privileges. Run it again after an Up that
// adds a table, and after operator.Client.Partition, which replaces the receipts table by a
// partitioned one.
//
// The grants cannot take away what ownership gives: role must own nothing in the schema and not
// be a member of its owner. Under such a role Up returns nil when the schema has every migration,
// and fails, saying what to do, when it lacks one.
//
// On a partitioned receipts table, Purge creates and drops partitions, which only the table's
// owner may do: purge receipts as the owner (tempotent purge --until-done, often enough that the
// days ahead are always there), and turn the workers' own purging off.
//
// Grants needs no database. It returns a *NameError for a role it will not grant to ("" or
// "none", "public", which is every role, a predefined "pg_" role, a name longer than Postgres
// keeps, or one with a NUL byte or invalid UTF-8) and for such a schema name.
func Grants(schemaName, role string) (string, error) {
	schemaName = cmp.Or(schemaName, SchemaDefault)
	if err := checkName("schema", schemaName); err != nil {
		return "", err
	}
	if err := checkName("role", role); err != nil {
		return "", err
	}
	s, r := pgx.Identifier{schemaName}.Sanitize(), pgx.Identifier{role}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- The grants of tempotent's runtime role %s in schema %s (migrate.Grants, tempotent migrate --print-grants).\n", r, s)
	b.WriteString("-- Run as the schema's owner, after migrating; again after a migration that adds a table, and after\n")
	b.WriteString("-- tempotent receipts partition. The role must own nothing in the schema and not be a member of its owner.\n")
	b.WriteString("BEGIN;\n")
	fmt.Fprintf(&b, "REVOKE ALL ON SCHEMA %s FROM %s;\n", s, r)
	fmt.Fprintf(&b, "GRANT USAGE ON SCHEMA %s TO %s;\n", s, r)
	tables := make([]string, len(runtimeGrants))
	for i, g := range runtimeGrants {
		tables[i] = s + "." + pgx.Identifier{g.table}.Sanitize()
	}
	fmt.Fprintf(&b, "REVOKE ALL ON TABLE %s FROM %s;\n", strings.Join(tables, ", "), r)
	fmt.Fprintf(&b, "REVOKE ALL ON ALL SEQUENCES IN SCHEMA %s FROM %s;\n", s, r)
	fmt.Fprintf(&b, "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %s FROM %s;\n", s, r)
	for i, g := range runtimeGrants {
		fmt.Fprintf(&b, "-- %s\nGRANT %s ON TABLE %s TO %s;\n", g.why, g.privileges, tables[i], r)
	}
	for _, f := range runtimeFunctions {
		fmt.Fprintf(&b, "-- %s\nGRANT EXECUTE ON FUNCTION %s.%s(%s) TO %s;\n", f.why, s, pgx.Identifier{f.function}.Sanitize(), f.args, r)
	}
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

// checkName refuses a name that Grants must not write a grant for.
func checkName(what, name string) error {
	problem := ""
	switch {
	case name == "":
		problem = "is empty: name the role your workers connect as (CREATE ROLE tempotent_app LOGIN)"
	case strings.ContainsRune(name, 0) || !utf8.ValidString(name):
		problem = "holds a NUL byte or invalid UTF-8, which Postgres does not take in a name"
	case len(name) > maxName:
		problem = fmt.Sprintf("is %d bytes long: Postgres keeps %d and would cut it to another name; choose a shorter one", len(name), maxName)
	case strings.HasPrefix(name, "pg_"):
		problem = "begins with pg_, which Postgres reserves for its own " + what + "s; choose another"
	case what == "role" && name == "public":
		problem = "is PUBLIC, every role: create a role of its own for the workers (CREATE ROLE tempotent_app LOGIN)"
	case what == "role" && name == "none":
		problem = "is reserved by Postgres; choose another"
	default:
		return nil
	}
	return &NameError{What: what, Name: name, Problem: problem}
}
