package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/tempotent/tempotent/internal/schema"
)

// TestKeyedStatementsUseTheKey asks Postgres how it would run each statement that finds
// receipts by their key, on the table a busy worker leaves between two vacuums: statistics that
// say almost nothing is pending, and an unresolved index that still holds an entry for each of
// thousands of receipts completed since. Every one must reach its rows through the key's index.
// The unresolved index is partial, and the planner would take it for any statement that says
// state = 'pending' — scanning it whole for one key, live and dead entries alike, a cost that
// grows with the load (see stillPending) — and a sequential scan reads the whole table.
//
// With TEMPOTENT_TEST_PARTITIONED set, on the partitioned table, where each day's partition has its
// own copy of each index (and the days created ahead, empty, are read sequentially).
func TestKeyedStatementsUseTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := layoutStore(t)
	// Receipts reserved and then completed, as a worker leaves them, written in bulk.
	_, err := s.db.Exec(ctx, `INSERT INTO `+s.table()+` (namespace, tenant, operation, id, token, fingerprint,
		fingerprint_version, state, reservation, lease_expires_at, expires_at)
	SELECT 'reserve', '', 'Charge', 'done-' || g, 'token-' || g, '\x00', 1, 'pending', gen_random_uuid(),
		now() + interval '1 minute', now() + interval '7 days'
	FROM generate_series(1, 2000) AS g`)
	require.NoError(t, err)
	_, err = s.db.Exec(ctx, `UPDATE `+s.table()+` SET state = 'completed', result = '1', lease_expires_at = NULL`)
	require.NoError(t, err)
	_, err = s.db.Exec(ctx, `ANALYZE `+s.table())
	require.NoError(t, err)

	statements := keyedStatements(t, s)
	// Each statement as Postgres may run it: planned for its arguments (a custom plan), and on
	// the plan it makes once per connection for any arguments (the generic plan), which it
	// switches to after five executions whenever custom plans do not cost less. Measured: every
	// reserveBatch from the sixth on, a completeBatch from batches of 8, most single-key
	// statements.
	conn, err := s.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, st := range statements {
		under(t, s, conn, st.settings, func() {
			var custom []struct{ Plan planNode }
			require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&custom), st.name)
			require.Len(t, custom, 1, st.name)
			checkKeyedPlan(t, s, st.name+" (custom plan)", custom[0].Plan)
			checkKeyedPlan(t, s, st.name+" (generic plan)", explainGeneric(t, conn, st.name, st.sql, st.args))
		})
	}
}

// TestKeyedPlansMadeOnAFreshTable keeps a generic plan Postgres made while the receipts table
// was new and empty, and asks how it runs once the table holds rows. Postgres keeps a generic
// plan until the table is next analyzed (autovacuum does so about a minute after a new table's
// first 50 rows, ahead of that only if a person does), and a plan made for a table it takes to
// be a few pages long is free to read it sequentially, or to hash the whole of it — for every
// statement, on every connection that planned early, in the first minute of a new deployment's
// load or of each day's new partition. Then it plans each statement afresh on that table, which
// has rows and was never analyzed. Each keyed statement must reach its rows through the key's
// index, by its whole key, either way.
func TestKeyedPlansMadeOnAFreshTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := layoutStore(t)
	statements := keyedStatements(t, s)
	conn, err := s.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	generic := forceGenericPlans(t, conn)
	defer generic()
	prepared := make([]string, len(statements))
	for i, st := range statements {
		prepared[i] = prepareKeyed(t, conn, st.name, st.sql)
		defer deallocate(t, conn, prepared[i])
		under(t, s, conn, st.settings, func() {
			explainExecute(t, conn, prepared[i], st.args) // plans it, on the table with one receipt
		})
	}
	_, err = s.db.Exec(ctx, `INSERT INTO `+s.table()+` (namespace, tenant, operation, id, token, fingerprint,
		fingerprint_version, state, result, reservation, lease_expires_at, expires_at)
	SELECT 'reserve', '', 'Charge', 'later-' || g, 'token-' || g, '\x00', 1, 'completed', $1::bytea, gen_random_uuid(),
		NULL, now() + interval '7 days'
	FROM generate_series(1, 2000) AS g`, schema.VoidResult)
	require.NoError(t, err)
	for i, st := range statements {
		under(t, s, conn, st.settings, func() {
			checkKeyedPlan(t, s, st.name+" (generic plan made on the new table)", explainExecute(t, conn, prepared[i], st.args))
		})
	}
	// Planned afresh on the table that has rows and was never analyzed, as on a new table
	// before autovacuum's first visit, or on any table after pg_upgrade, which carries no
	// statistics over: the planner guesses how many receipts each part of the key matches.
	generic()
	for _, st := range statements {
		under(t, s, conn, st.settings, func() {
			var custom []struct{ Plan planNode }
			require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&custom), st.name)
			checkKeyedPlan(t, s, st.name+" (planned on the table never analyzed)", custom[0].Plan)
		})
	}
}

// layoutStore is a store on a new receipts table, partitioned with TEMPOTENT_TEST_PARTITIONED set.
func layoutStore(t *testing.T) *Store {
	t.Helper()
	s := reserveStore(t, Config{})
	if os.Getenv("TEMPOTENT_TEST_PARTITIONED") != "" {
		require.NoError(t, s.Partition(context.Background()))
	}
	return s
}

// keyedStatement is one statement that finds receipts by their key, with arguments to plan it
// for and the settings it is sent behind where they change its plan (noSettings where they set
// only timeouts or how it commits).
type keyedStatement struct {
	name, settings, sql string
	args                []any
}

// keyedStatements are the statements that find receipts by their key, with arguments for a
// receipt they reserve on s (held), one completed by another attempt, and ones not there yet.
func keyedStatements(t *testing.T, s *Store) []keyedStatement {
	t.Helper()
	ctx := context.Background()
	held := reserveCall(t, "held", true)
	res := newReservation()
	_, err := s.reserveOne(ctx, &reserveReq{call: held, reservation: res, lease: time.Hour})
	require.NoError(t, err)
	k := held.Key
	completed := func(id string) *completion {
		c := reserveCall(t, id, true)
		return &completion{key: c.Key, reservation: newReservation(), fingerprint: c.Fingerprint,
			outcome: outcome{state: schema.StateCompleted, result: []byte("1")}}
	}
	reservation := func(id string) *reserveReq {
		return &reserveReq{call: reserveCall(t, id, true), reservation: newReservation(), lease: time.Minute}
	}
	return []keyedStatement{
		{"read", noSettings, s.sql.read, []any{k.Namespace, k.Tenant, k.Operation, k.ID}},
		{"readItems", noSettings, s.sql.readItems, []any{k.Namespace, k.Tenant, k.Operation, []string{k.ID, "other"}, string(k.Token())}},
		{"reserve", noSettings, s.sql.reserve, s.reserveArgs(reserveCall(t, "new", true), newReservation(), time.Minute)},
		{"reserveBatch", noSettings, s.sql.reserveBatch, s.reserveBatchArgs([]*reserveReq{reservation("new-1"), reservation("new-2")})},
		{"takeOver", noSettings, s.sql.takeOver, []any{k.Namespace, k.Tenant, k.Operation, k.ID, res.uuid(), newReservation().uuid(),
			time.Minute.Microseconds(), s.cfg.Retention.Microseconds()}},
		{"readTakeOver", noSettings, s.sql.readTakeOver, []any{k.Namespace, k.Tenant, k.Operation, k.ID, newReservation().uuid(),
			time.Minute.Microseconds(), s.cfg.Retention.Microseconds(), held.Fingerprint.Sum[:], held.Fingerprint.Version, true}},
		{"complete", noSettings, s.sql.complete, completed("held").args(s)},
		{"completeSkipLocked", noSettings, s.sql.completeSkipLocked, completed("held").args(s)},
		{"completeBatch", s.sql.completeBatchSettings, s.sql.completeBatch,
			s.completeBatchArgs([]*completion{completed("held"), completed("other")})},
		{"release", noSettings, s.sql.release, []any{k.Namespace, k.Tenant, k.Operation, k.ID, res.uuid(), true, newReservation().uuid(), int64(0)}},
		{"extend", noSettings, s.sql.extend, []any{k.Namespace, k.Tenant, k.Operation, k.ID, res.uuid(), time.Minute.Microseconds()}},
	}
}

// under runs f on conn in a transaction opened behind settings, as Store.send sends a statement
// behind them, so that what f plans is planned as the store's statement is.
func under(t *testing.T, s *Store, conn *pgxpool.Conn, settings string, f func()) {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	if settings != noSettings {
		_, err = conn.Exec(ctx, settings, s.lockTimeout, s.statementTimeout)
		require.NoError(t, err)
	}
	f()
	_, err = conn.Exec(ctx, "COMMIT")
	require.NoError(t, err)
}

// explainGeneric returns the generic plan Postgres makes for sql on conn: the statement prepared
// under force_generic_plan, then EXPLAIN EXECUTE with args. The setting is reset after, so that
// the connection's next EXPLAIN plans for its arguments again.
func explainGeneric(t *testing.T, conn *pgxpool.Conn, name, sql string, args []any) planNode {
	t.Helper()
	defer forceGenericPlans(t, conn)()
	prepared := prepareKeyed(t, conn, name, sql)
	defer deallocate(t, conn, prepared)
	return explainExecute(t, conn, prepared, args)
}

// forceGenericPlans makes Postgres run every prepared statement on conn on its generic plan until
// the function it returns is called.
func forceGenericPlans(t *testing.T, conn *pgxpool.Conn) (reset func()) {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	return func() {
		_, err := conn.Exec(ctx, "RESET plan_cache_mode")
		require.NoError(t, err)
	}
}

// prepareKeyed prepares sql on conn under a name made from name, and returns that name.
func prepareKeyed(t *testing.T, conn *pgxpool.Conn, name, sql string) string {
	t.Helper()
	prepared := "keyed_" + strings.ToLower(name) // as EXECUTE spells it
	_, err := conn.Conn().Prepare(context.Background(), prepared, sql)
	require.NoError(t, err, name)
	return prepared
}

func deallocate(t *testing.T, conn *pgxpool.Conn, prepared string) {
	t.Helper()
	require.NoError(t, conn.Conn().Deallocate(context.Background(), prepared))
}

// explainExecute returns the plan Postgres runs the prepared statement on with args: the one it
// has cached, if it has one it would reuse.
func explainExecute(t *testing.T, conn *pgxpool.Conn, prepared string, args []any) planNode {
	t.Helper()
	params := make([]string, len(args))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	// EXPLAIN EXECUTE takes no bind parameters: pgx writes the arguments into its text.
	var plan []struct{ Plan planNode }
	require.NoError(t, conn.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) EXECUTE "+prepared+"("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&plan), prepared)
	require.Len(t, plan, 1, prepared)
	return plan[0].Plan
}

// checkKeyedPlan fails t unless plan reaches its rows through the key's index, by the whole key:
// no partial index, no index whose first column is not the key's, no descent of the key's index
// without the namespace or without the ID, no sequential scan of a relation that holds rows.
func checkKeyedPlan(t *testing.T, s *Store, name string, plan planNode) {
	t.Helper()
	ctx := context.Background()
	scans := 0
	for _, n := range plan.all() {
		switch {
		case n.NodeType == "Seq Scan":
			// The planner reads an empty table (a day's partition created ahead) so.
			var rows bool
			require.NoError(t, s.db.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT FROM %q.%q)`, s.cfg.Schema, n.Relation)).Scan(&rows))
			if rows {
				t.Errorf("%s reads %s sequentially:\n%s", name, n.Relation, plan)
			}
		case n.Index != "":
			var partial, byKey, byCompensates bool
			require.NoError(t, s.db.QueryRow(ctx, `SELECT i.indpred IS NOT NULL, a.attname = 'namespace', a.attname = 'compensates'
				FROM pg_index AS i JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
				WHERE i.indexrelid = to_regclass($1)`, fmt.Sprintf("%q.%q", s.cfg.Schema, n.Index)).Scan(&partial, &byKey, &byCompensates),
				"%s: index %s", name, n.Index)
			if byCompensates && strings.HasPrefix(n.IndexCond, "(compensates = ") && !strings.Contains(n.IndexCond, " AND ") {
				// compensatedBy, and readItems' batch: a completed compensation by the token of
				// the receipt the key found (or of the batch), in the small index of
				// compensations.
				continue
			}
			scans++
			if partial || !byKey {
				t.Errorf("%s looks its key up in %s, not in the key's index:\n%s", name, n.Index, plan)
			} else if !strings.Contains(n.IndexCond, "namespace =") || !strings.Contains(n.IndexCond, "(id =") {
				// The key's index descended without the whole key reads all of it, or every
				// receipt of the key's operation.
				t.Errorf("%s reads %s without its whole key (%s):\n%s", name, n.Index, n.IndexCond, plan)
			}
		}
	}
	require.NotZero(t, scans, "%s uses no index", name)
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan, with the fields the test looks at.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

// all is n and every node below it.
func (n planNode) all() []planNode {
	nodes := []planNode{n}
	for _, p := range n.Plans {
		nodes = append(nodes, p.all()...)
	}
	return nodes
}

func (n planNode) String() string {
	b, _ := json.MarshalIndent(n, "", "  ")
	return string(b)
}

// TestBatchStatementsRunOnTheirGenericPlans sends a batch of reservations and one of completions
// through the store, each from its first execution on a connection, and asks the connection
// how Postgres ran them: on their generic plans (genericPlan), not planned afresh for the batch,
// as Postgres left to itself does at every execution of either. Partitioned with
// TEMPOTENT_TEST_PARTITIONED set.
func TestBatchStatementsRunOnTheirGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := layoutStore(t)
	conn, err := s.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	s.receipts = conn // every statement on the one connection whose prepared statements are read below

	for _, dedup := range []bool{true, false} { // each of reserveBatch's two settings
		var calls []Call
		for i := range 3 {
			calls = append(calls, reserveCall(t, fmt.Sprint("generic-", dedup, i), dedup))
		}
		reservations, completions := batchOf(calls...)
		s.reservations.send(reservations)
		for _, r := range reservations {
			require.NoError(t, r.err)
			require.True(t, r.receipt.inserted)
		}
		s.completions.send(completions)
		for _, c := range completions {
			require.NoError(t, c.err)
			require.True(t, c.written)
		}
	}
	for name, sql := range map[string]string{"reserveBatch": s.sql.reserveBatch, "completeBatch": s.sql.completeBatch} {
		var generic, custom int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
			sql).Scan(&generic, &custom), name)
		require.Equal(t, [2]int64{2, 0}, [2]int64{generic, custom}, "%s: executions on the generic plan, on a plan made for the batch", name)
	}
}
