package outbox

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// TestListFindsStuckMessagesByTheIndex: on an outbox never analyzed that holds many delivered
// messages, List's pages of undelivered, pending or dead messages (with a topic or an error
// filter, or a cursor) and the selection of RequeueDead read the index of undelivered messages,
// not the delivered ones; a key filter reads the ordering index. ListFilter's comment promises it.
func TestListFindsStuckMessagesByTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	table := pgx.Identifier{name, "outbox"}.Sanitize()
	pgtest.NeverAnalyzed(t, table)
	_, err := pgtest.Pool(t).Exec(ctx, `INSERT INTO `+table+` (id, topic, payload, digest, state, delivered_at)
		SELECT 'delivered-' || g, 'orders', '\x00', '\x00', 'delivered', now() FROM generate_series(1, 20000) AS g;
		INSERT INTO `+table+` (id, topic, ordering_key, payload, digest, state)
		SELECT 'dead-' || g, 'orders', 'k' || (g % 10), '\x00', '\x00', 'dead' FROM generate_series(1, 200) AS g`)
	require.NoError(t, err)

	// plan returns the generic plan of q (made without its arguments, as Postgres may choose for a
	// statement pgx has prepared and run five times) behind byIndex.
	plan := func(q query, limit string) string {
		t.Helper()
		tx, err := pgtest.Pool(t).Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		_, err = tx.Exec(ctx, byIndex+"; SET LOCAL plan_cache_mode = force_generic_plan; PREPARE planned AS "+q.sql+limit)
		require.NoError(t, err)
		execute := "EXECUTE planned"
		if len(q.args) > 0 {
			// EXECUTE takes its arguments as literals, not as parameters of the EXPLAIN.
			params := make([]string, len(q.args))
			for i, a := range q.args {
				switch a := a.(type) {
				case string:
					params[i] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
				case int64:
					params[i] = strconv.FormatInt(a, 10)
				default:
					t.Fatalf("plan: argument %d is a %T", i, a)
				}
			}
			execute += "(" + strings.Join(params, ", ") + ")"
		}
		got := pgtest.Explain(t, tx, execute)
		_, err = tx.Exec(ctx, "DEALLOCATE planned") // prepared statements outlive the transaction
		require.NoError(t, err)
		return got
	}
	for what, f := range map[string]ListFilter{
		"undelivered":        {},
		"dead":               {State: StateDead},
		"pending, newest":    {State: StatePending, Newest: true, After: 150},
		"dead of a topic":    {State: StateDead, Topic: "orders", ErrorContains: "503"},
		"dead, older than 1": {State: StateDead, OlderThan: 1},
	} {
		q, err := selectMessages(table, f, "")
		require.NoError(t, err)
		got := plan(q, " LIMIT 101")
		require.NotContains(t, got, "Seq Scan", "%s reads the outbox whole:\n%s", what, got)
		require.Contains(t, got, "outbox_undelivered_idx", "List of %s does not read the undelivered index:\n%s", what, got)
		// BlockedBy: one probe of the key's index per message.
		require.Contains(t, got, "outbox_ordering_idx", "List of %s looks for the blocking message without the ordering index:\n%s", what, got)
	}
	q, err := selectMessages(table, ListFilter{State: StateDead}, "FOR UPDATE SKIP LOCKED")
	require.NoError(t, err)
	got := plan(q, "")
	require.Contains(t, got, "outbox_undelivered_idx", "RequeueDead's selection does not read the undelivered index:\n%s", got)
	q, err = selectMessages(table, ListFilter{Key: "k3"}, "")
	require.NoError(t, err)
	got = plan(q, " LIMIT 101")
	require.Contains(t, got, "outbox_ordering_idx", "List of a key does not read the ordering index:\n%s", got)
}
