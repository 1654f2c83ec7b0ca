package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// webhooks shows, per source, what a real handler answered over HTTP: accepted (from the inbox),
// duplicate and refused by reason (from its tallies, once flushed), the sources with tallies and
// no records among them; a source or reason that someone wrote into the table by hand is
// printed inert.
func TestWebhooksCommandShowsTallies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, tempotent := newStore(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	out, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: tempotent.schema})
	require.NoError(t, err)
	hooks := map[string]*webhook.Handler{}
	for _, source := range []string{"fakepay", "forged-only"} {
		h, err := webhook.NewHandler(pgtest.Pool(t), out, webhook.HandlerConfig{Source: source, Verifier: webhook.StandardWebhooks{Secrets: []string{secret}}, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		hooks[source] = h
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks[r.URL.Path[1:]].ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	send := func(source, id, key string) int {
		body := []byte(`{"type":"charge.succeeded","id":"` + id + `"}`)
		header, err := webhook.SignStandardWebhooks(key, id, time.Now(), body)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/"+source, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = header
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode
	}
	const forgedKey = "whsec_bm90IHRoZSBlbmRwb2ludCdzIHNlY3JldA=="
	for _, d := range []struct {
		source, id, key string
		status          int
	}{
		{"fakepay", "msg_1", secret, http.StatusOK},
		{"fakepay", "msg_2", secret, http.StatusOK},
		{"fakepay", "msg_1", secret, http.StatusOK}, // a duplicate
		{"fakepay", "msg_3", forgedKey, http.StatusUnauthorized},
		{"forged-only", "msg_1", forgedKey, http.StatusUnauthorized},
		{"forged-only", "msg_2", forgedKey, http.StatusUnauthorized},
	} {
		require.Equal(t, d.status, send(d.source, d.id, d.key), "%+v", d)
	}
	for _, h := range hooks {
		require.NoError(t, h.Close(ctx))
	}
	_, err = pgtest.Pool(t).Exec(ctx, "INSERT INTO "+tempotent.schema+`.webhook_tallies (minute, source, outcome, reason, count)
		VALUES (date_trunc('minute', now()), $1, 'refused', $1, 1)`, hostile)
	require.NoError(t, err)

	got := tempotent.ok("webhooks")
	t.Logf("$ tempotent webhooks\n%s", got)
	requireInert(t, got)
	require.Regexp(t, `\nfakepay\s+2\s+1\s+1\s+0\s+signature=1\s+2\s`, got)
	require.Regexp(t, `\nforged-only\s+0\s+0\s+2\s+0\s+signature=2\s+0\s+-\s+-\n`, got)
	require.Contains(t, got, strconv.Quote(hostile)+"  ", "the hand-written source is not shown quoted")
	require.Contains(t, got, strconv.Quote(hostile)+"=1", "the hand-written reason is not shown quoted")

	var asJSON struct {
		Consumers []struct {
			Name      string           `json:"name"`
			Recent    int64            `json:"recent"`
			Duplicate int64            `json:"duplicate"`
			Refused   int64            `json:"refused"`
			Reasons   map[string]int64 `json:"reasons"`
		} `json:"consumers"`
	}
	require.NoError(t, json.Unmarshal([]byte(tempotent.ok("webhooks", "--json")), &asJSON))
	require.Len(t, asJSON.Consumers, 3)
	require.Equal(t, "fakepay", asJSON.Consumers[1].Name)
	require.Equal(t, int64(2), asJSON.Consumers[1].Recent)
	require.Equal(t, int64(1), asJSON.Consumers[1].Duplicate)
	require.Equal(t, map[string]int64{"signature": 1}, asJSON.Consumers[1].Reasons)
}
