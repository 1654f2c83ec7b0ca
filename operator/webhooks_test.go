package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
)

// tallyRows writes tallies as handlers' flushes leave them: source, outcome, reason and count,
// minutesAgo minutes before the current one.
func tallyRows(t *testing.T, schema string, rows ...[5]any) {
	t.Helper()
	for _, r := range rows {
		_, err := pgtest.Pool(t).Exec(context.Background(), "INSERT INTO "+schema+`.webhook_tallies (minute, source, outcome, reason, count)
			VALUES (date_trunc('minute', now()) - $1::int * interval '1 minute', $2, $3, $4, $5)`, r[0], r[1], r[2], r[3], r[4])
		require.NoError(t, err)
	}
}

// WebhookTallies sums each source's minutes within the window by outcome, with the refusals and
// failures by reason, in source order; minutes before the window are left out.
func TestWebhookTallies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, schema := setupPlain(t, nil)
	none, err := op.WebhookTallies(ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, none)

	tallyRows(t, schema,
		[5]any{0, "stripe", "accepted", "", 5},
		[5]any{3, "stripe", "accepted", "", 2},
		[5]any{3, "stripe", "duplicate", "", 1},
		[5]any{0, "stripe", "refused", "signature", 40},
		[5]any{1, "stripe", "refused", "signature", 2},
		[5]any{1, "stripe", "refused", "stale", 1},
		[5]any{2, "stripe", "failed", "store", 3},
		[5]any{90, "stripe", "accepted", "", 1000}, // before an hour's window
		[5]any{10, "fakepay", "refused", "oversized", 1},
		[5]any{90, "github", "accepted", "", 7}, // only before the window
	)
	got, err := op.WebhookTallies(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, operator.WebhookTally{Source: "fakepay", Refused: 1, Reasons: map[string]int64{"oversized": 1}, Last: got[0].Last}, got[0])
	require.Equal(t, operator.WebhookTally{Source: "stripe", Accepted: 7, Duplicate: 1, Refused: 43, Failed: 3,
		Reasons: map[string]int64{"signature": 42, "stale": 1, "store": 3}, Last: got[1].Last}, got[1])
	require.Equal(t, 10*time.Minute, got[1].Last.Sub(got[0].Last), "Last is not the newest minute")

	wide, err := op.WebhookTallies(ctx, 2*time.Hour)
	require.NoError(t, err)
	require.Len(t, wide, 3)
	require.Equal(t, []string{"fakepay", "github", "stripe"}, []string{wide[0].Source, wide[1].Source, wide[2].Source})
	require.Equal(t, int64(7), wide[1].Accepted)
	require.Equal(t, int64(1007), wide[2].Accepted)

	_, err = op.WebhookTallies(ctx, 59*time.Second)
	require.ErrorContains(t, err, "at least a minute")

	_, err = pgtest.Pool(t).Exec(ctx, "DROP TABLE "+schema+".webhook_tallies")
	require.NoError(t, err)
	_, err = op.WebhookTallies(ctx, time.Hour)
	require.ErrorIs(t, err, migrate.ErrNotMigrated)
}

// PurgeWebhookTallies deletes the minutes older than olderThan, up to limit, and nothing newer.
func TestPurgeWebhookTallies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, schema := setupPlain(t, nil)
	week := int(operator.WebhookTalliesRetention / time.Minute)
	tallyRows(t, schema,
		[5]any{week + 1, "stripe", "accepted", "", 1},
		[5]any{week + 1, "stripe", "refused", "signature", 1},
		[5]any{week + 2, "fakepay", "accepted", "", 1},
		[5]any{week - 1, "stripe", "accepted", "", 1},
		[5]any{0, "stripe", "accepted", "", 1},
	)
	_, err := op.PurgeWebhookTallies(ctx, 59*time.Second, 0)
	require.ErrorContains(t, err, "at least a minute")
	n, err := op.PurgeWebhookTallies(ctx, operator.WebhookTalliesRetention, 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = op.PurgeWebhookTallies(ctx, operator.WebhookTalliesRetention, 2)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = op.PurgeWebhookTallies(ctx, operator.WebhookTalliesRetention, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	var left int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM "+schema+".webhook_tallies").Scan(&left))
	require.Equal(t, 2, left)
}
