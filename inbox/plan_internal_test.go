package inbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// TestPurgeFindsRecordsByTheirAge asks Postgres how it would run a purge on an inbox it has never
// analyzed (a new table before autovacuum's first visit, or any after pg_upgrade, which carries
// no statistics over), holding many records of the consumer, none expired: the purge must find
// the expired records by the index of processing times, not read the consumer's records in the
// primary key.
func TestPurgeFindsRecordsByTheirAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	table := pgx.Identifier{name, "inbox"}.Sanitize()
	pgtest.NeverAnalyzed(t, table)
	db := pgtest.Pool(t)
	_, err := db.Exec(ctx, `INSERT INTO `+table+` (consumer, message_id, processed_at)
		SELECT 'mailer', 'message-' || g, now() FROM generate_series(1, 20000) AS g`)
	require.NoError(t, err)

	plan := func(stmt string) string {
		return pgtest.Explain(t, db, stmt, "mailer", (7 * 24 * time.Hour).Microseconds(), 1000)
	}
	purge := purgeStatement(table)
	// The hazard, so that this test shows it still tests something: with the consumer written
	// plainly, the purge reads the consumer's records in the primary key.
	plain := strings.Replace(purge, "(consumer || '') = $1", "consumer = $1", 1)
	require.NotEqual(t, purge, plain)
	require.Regexp(t, `Index Scan on inbox_pkey|Index Scan using inbox_pkey on inbox inbox_1`, plan(plain),
		"the purge with its consumer written plainly no longer reads the primary key; this test no longer sets up the hazard")
	got := plan(purge)
	require.NotRegexp(t, `Index Scan on inbox_pkey|Index Scan using inbox_pkey on inbox inbox_1|Seq Scan`, got,
		"the purge reads the consumer's records, not the expired ones:\n%s", got)
	require.Contains(t, got, "inbox_processed_idx", "the purge does not find records by their age:\n%s", got)
}
