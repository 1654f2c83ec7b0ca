package worker_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
	"github.com/tempotent/tempotent/worker"
)

// A purge round deletes the webhook tallies older than operator.WebhookTalliesRetention, in
// batches, whatever the inbox's retention (even with the inbox's purge off), and keeps the
// newer ones: a real handler's flushed tallies stay, those of a week and more ago go.
func TestPurgeRoundWebhookTallies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	env := purgeEnv(t, schema, -1, nil) // the inbox's purge off
	table := pgx.Identifier{schema, "webhook_tallies"}.Sanitize()

	out, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: schema})
	require.NoError(t, err)
	hook, err := webhook.NewHandler(pgtest.Pool(t), out, webhook.HandlerConfig{Source: "fakepay", Verifier: webhook.StandardWebhooks{Secrets: []string{swSecret}}})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	hook.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(`{}`)))) // unsigned: refused
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.NoError(t, hook.Close(ctx))

	// 1,500 minutes past the retention: more than one batch.
	_, err = pgtest.Pool(t).Exec(ctx, "INSERT INTO "+table+` (minute, source, outcome, reason, count)
		SELECT date_trunc('minute', now()) - $1::bigint * interval '1 microsecond' - i * interval '1 minute', 'stripe', 'accepted', '', 1
		FROM generate_series(1, 1500) i`, operator.WebhookTalliesRetention.Microseconds())
	require.NoError(t, err)

	purged, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, worker.Purged{WebhookTallies: 1500}, purged)
	tallies, err := env.Operator.WebhookTallies(ctx, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, tallies, 1)
	require.Equal(t, "fakepay", tallies[0].Source)
	require.Equal(t, map[string]int64{"signature": 1}, tallies[0].Reasons)
}
