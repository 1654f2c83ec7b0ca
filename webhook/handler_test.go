package webhook_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

var quiet = slog.New(slog.DiscardHandler)

// scheme is a signature scheme as the handler tests use it: its verifier and its signer.
type scheme struct {
	name              string
	verifier          func(secrets ...string) webhook.Verifier
	secret, oldSecret string
	// sign returns the headers of a delivery of body, with event ID id, signed with secret at at.
	// Stripe takes the event ID from the body; Standard Webhooks from a header.
	sign func(t *testing.T, secret, id string, at time.Time, body []byte) http.Header
}

var schemes = []scheme{
	{
		name:      "Stripe",
		verifier:  func(secrets ...string) webhook.Verifier { return webhook.Stripe{Secrets: secrets} },
		secret:    stripeSecret,
		oldSecret: stripeOldSecret,
		sign: func(_ *testing.T, secret, _ string, at time.Time, body []byte) http.Header {
			return stripeHeader(webhook.SignStripe(secret, at, body))
		},
	},
	{
		name:      "StandardWebhooks",
		verifier:  func(secrets ...string) webhook.Verifier { return webhook.StandardWebhooks{Secrets: secrets} },
		secret:    swSecret,
		oldSecret: swOldSecret,
		sign:      signStandard,
	},
	{
		// Standard Webhooks with ed25519 (v1a): the "secrets" name key pairs (edKey), the
		// verifier holds their public keys.
		name: "StandardWebhooksV1a",
		verifier: func(names ...string) webhook.Verifier {
			return webhook.StandardWebhooks{PublicKeys: publicKeys(names...)}
		},
		secret:    "provider",
		oldSecret: "provider-previous",
		sign:      signV1a,
	},
	{
		name:      "GitHub",
		verifier:  func(secrets ...string) webhook.Verifier { return webhook.GitHub{Secrets: secrets} },
		secret:    ghSecret,
		oldSecret: "an older secret",
		sign:      signGitHub,
	},
}

// event is a Stripe-like event body. Its spacing and key order are not what encoding/json
// writes, so that a handler that re-encoded the body would store other bytes.
func event(id string, amount int) []byte {
	return fmt.Appendf(nil, "{\"id\": %q,  \"object\":\"event\", \"type\":\"payment_intent.succeeded\",\n \"data\":{\"object\":{\"amount\":%d,\"currency\":\"eur\"}}}\n", id, amount)
}

// hook is a handler on a fresh, migrated schema.
type hook struct {
	*webhook.Handler
	schema string
}

// newHook returns a handler for cfg, with these defaults for the tests: Source "stripe", a
// Stripe verifier of stripeSecret, a clock stopped at now, no logs.
func newHook(t *testing.T, cfg webhook.HandlerConfig) hook {
	t.Helper()
	return newHookOn(t, pgtest.Pool(t), cfg)
}

// newHookOn is newHook with the handler on pool.
func newHookOn(t *testing.T, pool *pgxpool.Pool, cfg webhook.HandlerConfig) hook {
	t.Helper()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pgtest.Pool(t), name))
	out, err := outbox.New(pool, &outbox.Config{Schema: name})
	require.NoError(t, err)
	cfg.Source = cmp.Or(cfg.Source, "stripe")
	if cfg.Verifier == nil && cfg.VerifierFor == nil {
		cfg.Verifier = webhook.Stripe{Secrets: []string{stripeSecret}}
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return now }
	}
	cfg.Logger = cmp.Or(cfg.Logger, quiet)
	h, err := webhook.NewHandler(pool, out, cfg)
	require.NoError(t, err)
	// Before the schema is dropped (cleanups run last first): no flush outlives the test.
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return hook{Handler: h, schema: name}
}

// post POSTs body with header to path, and returns the answer.
func (k hook) post(path string, header http.Header, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	maps.Copy(r.Header, header)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	k.ServeHTTP(w, r)
	return w
}

// answer is the JSON body of the handler's answers.
type answer struct {
	Received  bool   `json:"received"`
	Duplicate bool   `json:"duplicate"`
	Error     string `json:"error"`
}

func decode(t *testing.T, w *httptest.ResponseRecorder) answer {
	t.Helper()
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	var a answer
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a), "answer %q", w.Body.String())
	return a
}

// requireOK checks a 200 that reports the delivery as new (duplicate false) or as seen before.
func requireOK(t *testing.T, w *httptest.ResponseRecorder, duplicate bool) {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, "answer: %s", w.Body.String())
	require.Equal(t, answer{Received: true, Duplicate: duplicate}, decode(t, w))
}

// requireStatus checks a refusal with status and an error message.
func requireStatus(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	require.Equal(t, status, w.Code, "answer: %s", w.Body.String())
	a := decode(t, w)
	require.NotEmpty(t, a.Error)
	require.False(t, a.Received)
}

// rows counts what the handler stored: inbox records and outbox messages.
type rows struct{ Inbox, Outbox int }

func (k hook) rows(t *testing.T) rows {
	t.Helper()
	var r rows
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM "+k.schema+".inbox), (SELECT count(*) FROM "+k.schema+".outbox)").Scan(&r.Inbox, &r.Outbox))
	return r
}

// message is an outbox row as the tests look at it.
type message struct {
	Seq     int64
	ID      string
	Topic   string
	State   string
	Payload []byte
	Headers map[string]string
}

// messages returns the outbox's messages in the order they were put.
func (k hook) messages(t *testing.T) []message {
	t.Helper()
	rs, err := pgtest.Pool(t).Query(context.Background(), "SELECT seq, id, topic, state, payload, headers FROM "+k.schema+".outbox ORDER BY seq")
	require.NoError(t, err)
	defer rs.Close()
	var out []message
	for rs.Next() {
		var m message
		require.NoError(t, rs.Scan(&m.Seq, &m.ID, &m.Topic, &m.State, &m.Payload, &m.Headers))
		out = append(out, m)
	}
	require.NoError(t, rs.Err())
	return out
}

// exec runs sql on the shared pool, with schema in place of {{schema}}.
func (k hook) exec(t *testing.T, sql string) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), strings.ReplaceAll(sql, "{{schema}}", k.schema))
	require.NoError(t, err)
}

func TestHandlerStoresNewDeliveryOnce(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			k := newHook(t, webhook.HandlerConfig{Source: "fakepay", Verifier: sc.verifier(sc.secret)})
			body := event("evt_1", 1000)
			signed := sc.sign(t, sc.secret, "evt_1", now, body)

			requireOK(t, k.post("/", signed, body), false)
			msgs := k.messages(t)
			require.Len(t, msgs, 1)
			require.Equal(t, message{
				Seq:     msgs[0].Seq,
				ID:      webhook.MessageID("fakepay", "", "evt_1"),
				Topic:   "webhook.fakepay",
				State:   "pending",
				Payload: body,
				Headers: map[string]string{
					webhook.HeaderSource:    "fakepay",
					webhook.HeaderTenant:    "",
					webhook.HeaderID:        "evt_1",
					webhook.HeaderEventType: "payment_intent.succeeded",
				},
			}, msgs[0])
			require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))

			// The provider retries the same request, and later signs it again.
			for range 3 {
				requireOK(t, k.post("/", signed, body), true)
			}
			requireOK(t, k.post("/", sc.sign(t, sc.secret, "evt_1", now.Add(time.Minute), body), body), true)
			require.Equal(t, msgs, k.messages(t))
			require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))

			// Another event is another message.
			other := event("evt_2", 1000)
			requireOK(t, k.post("/", sc.sign(t, sc.secret, "evt_2", now, other), other), false)
			require.Equal(t, rows{Inbox: 2, Outbox: 2}, k.rows(t))
		})
	}
}

func TestHandlerConcurrentReplays(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			k := newHook(t, webhook.HandlerConfig{Verifier: sc.verifier(sc.secret)})
			body := event("evt_1", 1000)
			signed := sc.sign(t, sc.secret, "evt_1", now, body)

			const n = 20
			answers := make([]*httptest.ResponseRecorder, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					answers[i] = k.post("/", signed, body)
				})
			}
			close(start)
			wg.Wait()

			accepted := 0
			for i, w := range answers {
				require.Equal(t, http.StatusOK, w.Code, "request %d: %s", i, w.Body.String())
				if !decode(t, w).Duplicate {
					accepted++
				}
			}
			require.Equal(t, 1, accepted, "exactly one of the concurrent deliveries is the new one")
			require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))
		})
	}
}

// TestHandlerConcurrentReplaysBehindFailedDelivery makes the concurrent deliveries wait for
// each other: a delivery in flight holds the delivery ID's inbox record while twenty replays
// arrive and wait on it, and then fails (rolls back). One replay takes over, the others wait for
// it and are answered as duplicates; none is refused or answered 503.
func TestHandlerConcurrentReplaysBehindFailedDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = n + 2 // every replay holds a connection while it waits
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	k := newHookOn(t, pool, webhook.HandlerConfig{})
	body := event("evt_1", 1000)
	signed := stripeHeader(webhook.SignStripe(stripeSecret, now, body))

	// The delivery in flight: the inbox record, uncommitted (the handler's consumer is
	// "webhook/<source>").
	inFlight, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = inFlight.Rollback(ctx) }()
	_, err = inFlight.Exec(ctx, "INSERT INTO "+k.schema+".inbox (consumer, message_id) VALUES ($1, $2)",
		"webhook/stripe", webhook.MessageID("stripe", "", "evt_1"))
	require.NoError(t, err)

	answers := make([]*httptest.ResponseRecorder, n)
	var answered atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = k.post("/", signed, body)
			answered.Add(1)
		})
	}
	var waiting int
	require.Eventually(t, func() bool {
		if err := pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%inbox%'`, k.schema).Scan(&waiting); err != nil {
			return false
		}
		return waiting == n || answered.Load() > 0
	}, 30*time.Second, time.Millisecond, "%d of %d replays wait on the delivery in flight", waiting, n)
	if answered.Load() > 0 {
		wg.Wait()
		for i, w := range answers {
			require.Nil(t, w, "request %d was answered while the delivery in flight held its ID: %d %s", i, w.Code, w.Body.String())
		}
	}
	require.NoError(t, inFlight.Rollback(ctx))
	wg.Wait()

	accepted := 0
	for i, w := range answers {
		require.Equal(t, http.StatusOK, w.Code, "request %d: %s", i, w.Body.String())
		if !decode(t, w).Duplicate {
			accepted++
		}
	}
	require.Equal(t, 1, accepted, "exactly one of the waiting replays is the new one")
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))
}

func TestHandlerReplayADayLater(t *testing.T) {
	t.Parallel()
	clock := now
	k := newHook(t, webhook.HandlerConfig{Now: func() time.Time { return clock }}) // RetentionDefault: 30 days
	body := event("evt_1", 1000)
	requireOK(t, k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, clock, body)), body), false)
	first := k.messages(t)

	// A dispatcher delivered the message, a day passed, and the maintenance ran.
	k.exec(t, `UPDATE {{schema}}.inbox SET processed_at = processed_at - interval '25 hours'`)
	k.exec(t, `UPDATE {{schema}}.outbox SET state = 'delivered', delivered_at = now() - interval '25 hours',
		created_at = created_at - interval '25 hours', available_at = available_at - interval '25 hours'`)
	purged, err := k.Purge(context.Background(), 0)
	require.NoError(t, err)
	require.Zero(t, purged, "a day-old delivery ID was forgotten")

	// The provider's retry (or an operator's resend) a day later is signed a day later.
	clock = now.Add(25 * time.Hour)
	requireOK(t, k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, clock, body)), body), true)
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))
	first[0].State = "delivered"
	require.Equal(t, first, k.messages(t), "the message was put again")
}

// With HandlerConfig.Retention left zero, a delivery ID is remembered for RetentionDefault, 30
// days (Stripe retries for three, and operators resend by hand later): Purge forgets it only
// after that.
func TestHandlerRemembersDeliveriesForTheDefaultRetention(t *testing.T) {
	t.Parallel()
	k := newHook(t, webhook.HandlerConfig{})
	body := event("evt_1", 1000)
	requireOK(t, k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, now, body)), body), false)

	k.exec(t, `UPDATE {{schema}}.inbox SET processed_at = processed_at - interval '29 days 23 hours'`)
	purged, err := k.Purge(context.Background(), 0)
	require.NoError(t, err)
	require.Zero(t, purged, "a delivery ID was forgotten within the default retention of 30 days")

	k.exec(t, `UPDATE {{schema}}.inbox SET processed_at = processed_at - interval '2 hours'`)
	purged, err = k.Purge(context.Background(), 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, purged, "a delivery ID was kept past the default retention of 30 days")
}

// TestHandlerReplayPastRetentionIsNewEvent documents the horizon of the deduplication: a
// delivery ID is remembered for HandlerConfig.Retention by the inbox, and its message for the
// outbox's retention by the outbox. Past both (and once Handler.Purge and Outbox.Prune have run), a redelivery
// is a new event: it is stored and delivered again, under the same message ID, so that only a
// receiver that still remembers that ID (a running workflow's update ID) absorbs it.
func TestHandlerReplayPastRetentionIsNewEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const retention = 48 * time.Hour
	clock := now
	k := newHook(t, webhook.HandlerConfig{Retention: retention, Now: func() time.Time { return clock }})
	out, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: k.schema}) // RetentionDefault: 7 days
	require.NoError(t, err)
	body := event("evt_1", 1000)
	post := func(body []byte) *httptest.ResponseRecorder {
		return k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, clock, body)), body)
	}
	age := func(interval string) {
		k.exec(t, `UPDATE {{schema}}.inbox SET processed_at = processed_at - interval '`+interval+`'`)
		k.exec(t, `UPDATE {{schema}}.outbox SET state = 'delivered', delivered_at = coalesce(delivered_at, now()) - interval '`+interval+`',
			created_at = created_at - interval '`+interval+`', available_at = available_at - interval '`+interval+`'`)
	}

	requireOK(t, post(body), false)
	first := k.messages(t)

	// Past the handler's retention, within the outbox's: the inbox forgets the delivery ID, the
	// outbox still holds the delivered message.
	age("49 hours")
	clock = clock.Add(49 * time.Hour)
	purged, err := k.Purge(ctx, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	pruned, err := out.Prune(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, pruned)

	// The ID with another body is still refused: the outbox's message under it differs.
	requireStatus(t, post(event("evt_1", 9999)), http.StatusConflict)
	require.Equal(t, rows{Inbox: 0, Outbox: 1}, k.rows(t))

	// The same body is taken (the inbox records it again) but the outbox does not put its
	// message twice: nothing is delivered again.
	requireOK(t, post(body), false)
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))
	first[0].State = "delivered"
	require.Equal(t, first, k.messages(t))

	// Past the outbox's retention too: the horizon. The redelivery is a new message, pending
	// delivery, under the same message ID.
	age("8 days")
	clock = clock.Add(8 * 24 * time.Hour)
	purged, err = k.Purge(ctx, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	pruned, err = out.Prune(ctx, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned)
	require.Equal(t, rows{}, k.rows(t))

	requireOK(t, post(body), false)
	again := k.messages(t)
	require.Len(t, again, 1)
	require.Greater(t, again[0].Seq, first[0].Seq, "a new message")
	require.Equal(t, "pending", again[0].State)
	require.Equal(t, first[0].ID, again[0].ID)
	require.Equal(t, body, again[0].Payload)
}

func TestHandlerRefuses(t *testing.T) {
	t.Parallel()
	const maxBody = 1024
	tenant := func(r *http.Request) (string, error) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/hooks/"); ok && name == "acme" {
			return name, nil
		}
		return "", fmt.Errorf("no tenant at %s", r.URL.Path)
	}
	hooks := map[string]hook{}
	for _, sc := range schemes {
		hooks[sc.name] = newHook(t, webhook.HandlerConfig{Verifier: sc.verifier(sc.secret), Tenant: tenant, MaxBodyBytes: maxBody})
	}
	body := event("evt_1", 1000)
	large := event("evt_1", 1000)
	large = append(large[:len(large)-2], []byte(`,"pad":"`+strings.Repeat("x", maxBody)+`"}`)...)
	stripe := func(secret string, at time.Time, b []byte) http.Header {
		return stripeHeader(webhook.SignStripe(secret, at, b))
	}
	sw := func(secret, id string, at time.Time, b []byte) http.Header { return signStandard(t, secret, id, at, b) }
	without := func(h http.Header, name string) http.Header { h.Del(name); return h }

	tests := []struct {
		name   string
		scheme string
		method string // default POST
		path   string // default /hooks/acme
		header http.Header
		body   []byte // default body
		want   int
	}{
		{name: "ForgedSignature", scheme: "Stripe", header: stripe(otherSecret, now, body), want: http.StatusUnauthorized},
		{name: "TamperedBody", scheme: "Stripe", header: stripe(stripeSecret, now, body), body: event("evt_1", 1), want: http.StatusUnauthorized},
		{name: "StalePast", scheme: "Stripe", header: stripe(stripeSecret, now.Add(-10*time.Minute), body), want: http.StatusBadRequest},
		{name: "StaleFuture", scheme: "Stripe", header: stripe(stripeSecret, now.Add(10*time.Minute), body), want: http.StatusBadRequest},
		{name: "MissingSignature", scheme: "Stripe", header: http.Header{}, want: http.StatusUnauthorized},
		{name: "GarbledSignature", scheme: "Stripe", header: stripeHeader("garbage"), want: http.StatusBadRequest},
		{name: "Oversized", scheme: "Stripe", header: stripe(stripeSecret, now, large), body: large, want: http.StatusRequestEntityTooLarge},
		{name: "MalformedJSON", scheme: "Stripe", header: stripe(stripeSecret, now, []byte(`{"id":"evt_1",`)), body: []byte(`{"id":"evt_1",`), want: http.StatusBadRequest},
		{name: "MissingEventID", scheme: "Stripe", header: stripe(stripeSecret, now, []byte(`{"type":"x"}`)), body: []byte(`{"type":"x"}`), want: http.StatusBadRequest},
		{name: "GET", scheme: "Stripe", method: http.MethodGet, header: stripe(stripeSecret, now, body), want: http.StatusMethodNotAllowed},
		{name: "UnknownTenant", scheme: "Stripe", path: "/hooks/globex", header: stripe(stripeSecret, now, body), want: http.StatusNotFound},

		{name: "ForgedSignature", scheme: "StandardWebhooks", header: sw(otherSecret, "evt_1", now, body), want: http.StatusUnauthorized},
		{name: "TamperedBody", scheme: "StandardWebhooks", header: sw(swSecret, "evt_1", now, body), body: event("evt_1", 1), want: http.StatusUnauthorized},
		{name: "TamperedID", scheme: "StandardWebhooks", header: func() http.Header {
			h := sw(swSecret, "evt_1", now, body)
			h.Set("Webhook-Id", "evt_2")
			return h
		}(), want: http.StatusUnauthorized},
		{name: "StalePast", scheme: "StandardWebhooks", header: sw(swSecret, "evt_1", now.Add(-10*time.Minute), body), want: http.StatusBadRequest},
		{name: "MissingSignature", scheme: "StandardWebhooks", header: without(sw(swSecret, "evt_1", now, body), "Webhook-Signature"), want: http.StatusUnauthorized},
		{name: "MissingID", scheme: "StandardWebhooks", header: without(sw(swSecret, "evt_1", now, body), "Webhook-Id"), want: http.StatusBadRequest},
		{name: "MissingTimestamp", scheme: "StandardWebhooks", header: without(sw(swSecret, "evt_1", now, body), "Webhook-Timestamp"), want: http.StatusBadRequest},
		{name: "Oversized", scheme: "StandardWebhooks", header: sw(swSecret, "evt_1", now, large), body: large, want: http.StatusRequestEntityTooLarge},
		{name: "GET", scheme: "StandardWebhooks", method: http.MethodGet, header: sw(swSecret, "evt_1", now, body), want: http.StatusMethodNotAllowed},
		{name: "UnknownTenant", scheme: "StandardWebhooks", path: "/hooks/globex", header: sw(swSecret, "evt_1", now, body), want: http.StatusNotFound},
		{name: "IDWithDot", scheme: "StandardWebhooks", header: func() http.Header {
			h := sw(swSecret, "evt_1", now, body)
			h.Set("Webhook-Id", "evt.1")
			h.Set("Webhook-Signature", signV1(mustDecode(t, swSecret), "evt.1", strconv.FormatInt(now.Unix(), 10), body))
			return h
		}(), want: http.StatusBadRequest},

		{name: "WrongKey", scheme: "StandardWebhooksV1a", header: signV1a(t, "intruder", "evt_1", now, body), want: http.StatusUnauthorized},
		{name: "WrongScheme", scheme: "StandardWebhooksV1a", header: sw(swSecret, "evt_1", now, body), want: http.StatusUnauthorized},
		{name: "TamperedBody", scheme: "StandardWebhooksV1a", header: signV1a(t, "provider", "evt_1", now, body), body: event("evt_1", 1), want: http.StatusUnauthorized},
		{name: "StalePast", scheme: "StandardWebhooksV1a", header: signV1a(t, "provider", "evt_1", now.Add(-10*time.Minute), body), want: http.StatusBadRequest},
		{name: "MissingID", scheme: "StandardWebhooksV1a", header: without(signV1a(t, "provider", "evt_1", now, body), "Webhook-Id"), want: http.StatusBadRequest},
		{name: "IDWithDot", scheme: "StandardWebhooksV1a", header: signV1a(t, "provider", "evt.1", now, body), want: http.StatusBadRequest},
		{name: "Oversized", scheme: "StandardWebhooksV1a", header: signV1a(t, "provider", "evt_1", now, large), body: large, want: http.StatusRequestEntityTooLarge},

		{name: "WrongSecret", scheme: "GitHub", header: signGitHub(t, "not the secret", "evt_1", now, body), want: http.StatusUnauthorized},
		{name: "WrongScheme", scheme: "GitHub", header: stripe(ghSecret, now, body), want: http.StatusUnauthorized},
		{name: "TamperedBody", scheme: "GitHub", header: signGitHub(t, ghSecret, "evt_1", now, body), body: event("evt_1", 1), want: http.StatusUnauthorized},
		{name: "MissingSignature", scheme: "GitHub", header: without(signGitHub(t, ghSecret, "evt_1", now, body), "X-Hub-Signature-256"), want: http.StatusUnauthorized},
		{name: "MissingDelivery", scheme: "GitHub", header: without(signGitHub(t, ghSecret, "evt_1", now, body), "X-GitHub-Delivery"), want: http.StatusBadRequest},
		{name: "Oversized", scheme: "GitHub", header: signGitHub(t, ghSecret, "evt_1", now, large), body: large, want: http.StatusRequestEntityTooLarge},
	}
	// Sequential: each case checks that the schema is still empty after it.
	for _, tc := range tests {
		t.Run(tc.scheme+"/"+tc.name, func(t *testing.T) {
			k := hooks[tc.scheme]
			b := tc.body
			if b == nil {
				b = body
			}
			r := httptest.NewRequest(cmp.Or(tc.method, http.MethodPost), cmp.Or(tc.path, "/hooks/acme"), bytes.NewReader(b))
			maps.Copy(r.Header, tc.header)
			w := httptest.NewRecorder()
			k.ServeHTTP(w, r)
			requireStatus(t, w, tc.want)
			if tc.want == http.StatusMethodNotAllowed {
				require.Equal(t, http.MethodPost, w.Header().Get("Allow"))
			}
			require.Equal(t, rows{}, k.rows(t), "a refused delivery left rows behind")
		})
	}

	// The genuine delivery, after all that, is new: nothing of the refused ones was recorded.
	requireOK(t, hooks["Stripe"].post("/hooks/acme", stripe(stripeSecret, now, body), body), false)
	requireOK(t, hooks["StandardWebhooks"].post("/hooks/acme", sw(swSecret, "evt_1", now, body), body), false)
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, hooks["Stripe"].rows(t))
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, hooks["StandardWebhooks"].rows(t))
	for _, name := range []string{"StandardWebhooksV1a", "GitHub"} {
		sc := schemeNamed(name)
		requireOK(t, hooks[name].post("/hooks/acme", sc.sign(t, sc.secret, "evt_1", now, body), body), false)
		require.Equal(t, rows{Inbox: 1, Outbox: 1}, hooks[name].rows(t))
	}
}

func schemeNamed(name string) scheme {
	for _, sc := range schemes {
		if sc.name == name {
			return sc
		}
	}
	panic("no scheme " + name)
}

// Deliveries are remembered per source: a second handler of the same source with another topic
// would take each delivery as a duplicate of the first's, and its topic would never get one. It
// is refused when built; a source of its own per endpoint works, and so does a second handler
// of the same source and topic (two paths to one endpoint).
func TestNewHandlerRefusesSameSourceOtherTopic(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pool, name))
	out, err := outbox.New(pool, &outbox.Config{Schema: name})
	require.NoError(t, err)
	build := func(source, topic string) (*webhook.Handler, error) {
		return webhook.NewHandler(pool, out, webhook.HandlerConfig{
			Source: source, Topic: topic, Verifier: webhook.Stripe{Secrets: []string{stripeSecret}},
			Now: func() time.Time { return now }, Logger: quiet,
		})
	}
	billing, err := build("stripe", "billing.stripe")
	require.NoError(t, err)

	_, err = build("stripe", "shipping.stripe")
	require.ErrorContains(t, err, `Source "stripe" already has a handler putting its deliveries under topic "billing.stripe"`)
	require.ErrorContains(t, err, "give each endpoint a Source of its own")
	_, err = build("stripe", "") // the default topic, webhook.stripe, is another topic too
	require.ErrorContains(t, err, `topic "webhook.stripe" would never get it`)

	again, err := build("stripe", "billing.stripe")
	require.NoError(t, err, "a second handler of the same endpoint was refused")
	shipping, err := build("stripe-shipping", "shipping.stripe")
	require.NoError(t, err)

	// Another schema is another store of deliveries: the same source may go elsewhere there.
	other := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pool, other))
	otherOut, err := outbox.New(pool, &outbox.Config{Schema: other})
	require.NoError(t, err)
	_, err = webhook.NewHandler(pool, otherOut, webhook.HandlerConfig{Source: "stripe", Topic: "shipping.stripe", Verifier: webhook.Stripe{Secrets: []string{stripeSecret}}})
	require.NoError(t, err)

	// The same event, sent to both endpoints, reaches both topics once each.
	body := event("evt_1", 1000)
	signed := stripeHeader(webhook.SignStripe(stripeSecret, now, body))
	for _, h := range []*webhook.Handler{billing, again, shipping} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		maps.Copy(r.Header, signed)
		h.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	}
	k := hook{schema: name}
	var topics []string
	for _, m := range k.messages(t) {
		topics = append(topics, m.Topic)
	}
	require.Equal(t, []string{"billing.stripe", "shipping.stripe"}, topics)
}

func TestHandlerSameDeliveryOtherBody(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			k := newHook(t, webhook.HandlerConfig{Verifier: sc.verifier(sc.secret)})
			body := event("evt_1", 1000)
			requireOK(t, k.post("/", sc.sign(t, sc.secret, "evt_1", now, body), body), false)
			stored := k.messages(t)

			other := event("evt_1", 9999)
			requireStatus(t, k.post("/", sc.sign(t, sc.secret, "evt_1", now, other), other), http.StatusConflict)
			require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))
			require.Equal(t, stored, k.messages(t))

			// The first body is still a plain duplicate.
			requireOK(t, k.post("/", sc.sign(t, sc.secret, "evt_1", now, body), body), true)
		})
	}
}

func TestHandlerSecretRotation(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			k := newHook(t, webhook.HandlerConfig{Verifier: sc.verifier(sc.secret, sc.oldSecret)})
			for i, secret := range []string{sc.oldSecret, sc.secret} {
				id := "evt_" + strconv.Itoa(i)
				body := event(id, 1000)
				requireOK(t, k.post("/", sc.sign(t, secret, id, now, body), body), false)
			}
			body := event("evt_other", 1000)
			requireStatus(t, k.post("/", sc.sign(t, otherSecret, "evt_other", now, body), body), http.StatusUnauthorized)
			require.Equal(t, rows{Inbox: 2, Outbox: 2}, k.rows(t))
		})
	}
}

func TestHandlerTenants(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{"acme": stripeSecret, "globex": stripeOldSecret}
	k := newHook(t, webhook.HandlerConfig{
		Tenant: func(r *http.Request) (string, error) { return r.PathValue("tenant"), nil },
		VerifierFor: func(tenant string) (webhook.Verifier, error) {
			secret, ok := secrets[tenant]
			if !ok {
				return nil, fmt.Errorf("no tenant %q", tenant)
			}
			return webhook.Stripe{Secrets: []string{secret}}, nil
		},
	})
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{tenant}", k)
	post := func(tenant, secret string, body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/hooks/"+tenant, bytes.NewReader(body))
		r.Header.Set("Stripe-Signature", webhook.SignStripe(secret, now, body))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	body := event("evt_1", 1000)

	// Each tenant's endpoint has its own secret: one tenant's signature is forged for another.
	requireStatus(t, post("globex", stripeSecret, body), http.StatusUnauthorized)
	requireStatus(t, post("initech", stripeSecret, body), http.StatusNotFound)
	require.Equal(t, rows{}, k.rows(t))

	// The same delivery ID for two tenants is two events, each deduplicated on its own.
	requireOK(t, post("acme", stripeSecret, body), false)
	requireOK(t, post("globex", stripeOldSecret, body), false)
	requireOK(t, post("acme", stripeSecret, body), true)
	requireOK(t, post("globex", stripeOldSecret, body), true)

	msgs := k.messages(t)
	require.Len(t, msgs, 2)
	for i, tenant := range []string{"acme", "globex"} {
		require.Equal(t, webhook.MessageID("stripe", tenant, "evt_1"), msgs[i].ID)
		require.Equal(t, tenant, msgs[i].Headers[webhook.HeaderTenant])
		require.Equal(t, body, msgs[i].Payload)
	}
	require.NotEqual(t, msgs[0].ID, msgs[1].ID)
	require.Equal(t, rows{Inbox: 2, Outbox: 2}, k.rows(t))
}

func TestHandlerDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	up := newHook(t, webhook.HandlerConfig{})

	// The same schema, through a pool whose server does not answer.
	port, err := freeport.Get()
	require.NoError(t, err)
	down, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=10", port))
	require.NoError(t, err)
	t.Cleanup(down.Close)
	out, err := outbox.New(down, &outbox.Config{Schema: up.schema})
	require.NoError(t, err)
	met := newTagRecorder()
	h, err := webhook.NewHandler(down, out, webhook.HandlerConfig{
		Source: "stripe", Verifier: webhook.Stripe{Secrets: []string{stripeSecret}}, Now: func() time.Time { return now }, Logger: quiet,
		Metrics: met,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })

	body := event("evt_1", 1000)
	signed := stripeHeader(webhook.SignStripe(stripeSecret, now, body))
	w := hook{Handler: h}.post("/", signed, body)
	requireStatus(t, w, http.StatusServiceUnavailable)
	after, err := strconv.Atoi(w.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", w.Header().Get("Retry-After"))
	require.Positive(t, after)
	require.Equal(t, rows{}, up.rows(t))
	// The same tag keys as a topic conflict's 500, so that a Prometheus reporter takes both.
	require.Equal(t, []string{"reason,source|store"}, met.tagSets(webhook.MetricFailed))

	// The provider's retry, once the database is back, is a new delivery: nothing was lost.
	requireOK(t, up.post("/", signed, body), false)
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, up.rows(t))
}

func TestNewHandlerRefusesBadConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	out, err := outbox.New(pool, nil)
	require.NoError(t, err)
	valid := webhook.Stripe{Secrets: []string{stripeSecret}}

	tests := []struct {
		name     string
		db       *pgxpool.Pool
		out      *outbox.Outbox
		cfg      webhook.HandlerConfig
		mentions string // a word the error must hold
	}{
		{name: "NoDB", out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: valid}, mentions: "db"},
		{name: "NoOutbox", db: pool, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: valid}, mentions: "outbox"},
		{name: "EmptySource", db: pool, out: out, cfg: webhook.HandlerConfig{Verifier: valid}, mentions: "Source"},
		{name: "UpperCaseSource", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "Stripe", Verifier: valid}, mentions: "Source"},
		{name: "SlashInSource", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe/live", Verifier: valid}, mentions: "Source"},
		{name: "SpaceInSource", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe live", Verifier: valid}, mentions: "Source"},
		{name: "LongSource", db: pool, out: out, cfg: webhook.HandlerConfig{Source: strings.Repeat("s", 65), Verifier: valid}, mentions: "Source"},
		{name: "NoVerifier", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe"}, mentions: "Verifier"},
		{name: "StripeNoSecrets", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: webhook.Stripe{}}, mentions: "Secrets"},
		{name: "StripeEmptySecret", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: webhook.Stripe{Secrets: []string{stripeSecret, ""}}}, mentions: "Secrets[1]"},
		{name: "StripeSecretWithNewline", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: webhook.Stripe{Secrets: []string{stripeSecret + "\n"}}}, mentions: "Secrets[0]"},
		{name: "StripeNegativeTolerance", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: webhook.Stripe{Secrets: []string{stripeSecret}, Tolerance: -time.Second}}, mentions: "Tolerance"},
		{name: "StandardWebhooksSecretNotBase64", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "svix", Verifier: webhook.StandardWebhooks{Secrets: []string{"whsec_not*base64"}}}, mentions: "Secrets[0]"},
		{name: "NegativeMaxBodyBytes", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: valid, MaxBodyBytes: -1}, mentions: "MaxBodyBytes"},
		{name: "NegativeRetention", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: valid, Retention: -time.Hour}, mentions: "Retention"},
		{name: "NegativeTallyEvery", db: pool, out: out, cfg: webhook.HandlerConfig{Source: "stripe", Verifier: valid, TallyEvery: -time.Second}, mentions: "TallyEvery"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := webhook.NewHandler(tc.db, tc.out, tc.cfg)
			require.ErrorContains(t, err, tc.mentions)
			require.Nil(t, h)
		})
	}

	for name, cfg := range map[string]webhook.HandlerConfig{
		"Stripe":           {Source: "stripe", Verifier: valid},
		"StandardWebhooks": {Source: "fake-pay.v2_eu", Verifier: webhook.StandardWebhooks{Secrets: []string{swSecret, swOldSecret}}},
		"VerifierFor":      {Source: "stripe", VerifierFor: func(string) (webhook.Verifier, error) { return valid, nil }},
	} {
		_, err := webhook.NewHandler(pool, out, cfg)
		require.NoError(t, err, name)
	}
}
