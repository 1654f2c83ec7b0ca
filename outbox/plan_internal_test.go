package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// TestUndeliveredAreFoundByTheIndex asks Postgres how it would run the statements that read the
// undelivered messages — the claim, and Stats' count — on an outbox it has never analyzed (a new
// table before autovacuum's first visit, or any after pg_upgrade, which carries no statistics
// over), holding many delivered messages, as one does for its retention. Without statistics the
// planner takes the partial index of undelivered messages to hold most of the table, and reads
// the table whole at every claim; behind byIndex each must stay on the index.
func TestUndeliveredAreFoundByTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	table := pgx.Identifier{name, "outbox"}.Sanitize()
	conn, err := pgtest.Pool(t).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pgtest.NeverAnalyzed(t, table)
	_, err = conn.Exec(ctx, `INSERT INTO `+table+` (id, topic, payload, digest, state, delivered_at)
		SELECT 'delivered-' || g, 'orders', '\x00', '\x00', 'delivered', now() FROM generate_series(1, 20000) AS g;
		INSERT INTO `+table+` (id, topic, payload, digest)
		SELECT 'pending-' || g, 'orders', '\x00', '\x00' FROM generate_series(1, 200) AS g`)
	require.NoError(t, err)

	// plan returns the plan of b's last statement, run behind the ones before it in one
	// transaction, as they are sent.
	plan := func(b *pgx.Batch) string {
		t.Helper()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		queued := b.QueuedQueries
		for _, q := range queued[:len(queued)-1] {
			_, err = tx.Exec(ctx, q.SQL, q.Arguments...)
			require.NoError(t, err)
		}
		last := queued[len(queued)-1]
		return pgtest.Explain(t, tx, last.SQL, last.Arguments...)
	}
	for name, b := range map[string]*pgx.Batch{
		"the claim": claimBatch(table, nil, 100, time.Minute, 10, "plan-test"),
		"Stats":     statsBatch(table),
	} {
		// The hazard, so that this test shows it still tests something: planned bare, the
		// statement reads the table sequentially.
		bare := &pgx.Batch{QueuedQueries: b.QueuedQueries[len(b.QueuedQueries)-1:]}
		require.Contains(t, plan(bare), "Seq Scan on outbox",
			"%s planned bare no longer reads the table whole; this test no longer sets up the hazard", name)
		got := plan(b)
		require.NotContains(t, got, "Seq Scan", "%s reads the outbox whole:\n%s", name, got)
		require.Contains(t, got, "outbox_undelivered_idx", "%s does not find messages by the undelivered index:\n%s", name, got)
	}
}

// The claim's UPDATE finds the rows its CTE chose by their primary key, one probe each, on a
// table with statistics too: written as a join with the CTE, it was planned as a hash join over
// the whole primary key index (every message kept, delivered ones included) at every claim of an
// analyzed outbox of a few thousand messages.
func TestClaimUpdatesByThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	table := pgx.Identifier{name, "outbox"}.Sanitize()
	_, err := pgtest.Pool(t).Exec(ctx, `INSERT INTO `+table+` (id, topic, payload, digest, state, delivered_at)
		SELECT 'delivered-' || g, 'orders', '\x00', '\x00', 'delivered', now() FROM generate_series(1, 3000) AS g;
		INSERT INTO `+table+` (id, topic, payload, digest)
		SELECT 'pending-' || g, 'orders', '\x00', '\x00' FROM generate_series(1, 3000) AS g;
		ANALYZE `+table)
	require.NoError(t, err)
	tx, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	b := claimBatch(table, nil, 100, time.Minute, 10, "plan-test")
	_, err = tx.Exec(ctx, b.QueuedQueries[0].SQL)
	require.NoError(t, err)
	claim := b.QueuedQueries[1]
	got := pgtest.Explain(t, tx, claim.SQL, claim.Arguments...)
	require.NotContains(t, got, "Hash Join", "the claim joins its chosen rows by hashing the table:\n%s", got)
	require.Regexp(t, `Index Scan using outbox_pkey on outbox m[^\n]*\n\s+Index Cond: \(seq = ANY`, got, "the claim does not update its rows by the primary key:\n%s", got)
}
