package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/console"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// An unknown outcome shows on the overview and in the unresolved list; the operator resolves it
// as applied through the receipt's form, and the receipt, its page and the audit log say so, with
// the signed-in user as the actor, whatever the form claims.
func TestResolveThroughTheForm(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.unknown("order-1")

	overview := e.get("/", bob)
	require.Contains(t, overview, `href="/receipts?state=unresolved">1</a>`, "the overview does not count the receipt waiting for a person")
	require.Contains(t, e.get("/receipts?state=unresolved", bob), string(tok))
	page := e.get(receiptPath(tok), alice)
	require.Contains(t, page, "Nobody knows whether the effect happened")
	require.Contains(t, page, `/receipts/`+string(tok)+`/resolve`)
	require.NotContains(t, e.get(receiptPath(tok), bob), `name="csrf"`, "a reader is shown the action forms")

	token := e.csrf(receiptPath(tok), alice)
	r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", &alice,
		form("csrf", token, "outcome", "applied", "result", `{"charge_id":"ch_1"}`, "reason", "INC-7: dashboard shows ch_1", "by", "mallory"), e.sameOrigin())
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	require.Equal(t, receiptPath(tok), r.header.Get("Location"))

	got, err := e.op.Receipt(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, operator.StatusSucceeded, got.Status)
	require.JSONEq(t, `{"charge_id":"ch_1"}`, got.ResultText())
	audit, err := e.op.Audit(context.Background(), tok)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, alice.Name, audit[0].Actor, "the audit log does not name the signed-in user")
	require.Equal(t, "INC-7: dashboard shows ch_1", audit[0].Reason)

	page = e.get(receiptPath(tok), alice)
	require.Contains(t, page, "INC-7: dashboard shows ch_1")
	require.Contains(t, page, "ch_1", "the operator does not see the decoded result")
	require.Contains(t, e.get("/audit", bob), "INC-7: dashboard shows ch_1")

	again := e.do(http.MethodPost, receiptPath(tok)+"/resolve", &alice,
		form("csrf", token, "outcome", "not-applied", "reason", "again"), e.sameOrigin())
	require.Equal(t, http.StatusConflict, again.status, "a recorded outcome was resolved again")
	require.Equal(t, 1, e.auditRows())
}

// A resolution without a reason, or applied without JSON, is refused and changes nothing.
func TestResolveRefusesAnIncompleteForm(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.unknown("order-1")
	token := e.csrf(receiptPath(tok), alice)
	for name, f := range map[string][]string{
		"NoReason":  {"csrf", token, "outcome", "not-applied"},
		"NoOutcome": {"csrf", token, "reason", "x"},
		"NotJSON":   {"csrf", token, "outcome", "applied", "result", "ch_1", "reason", "x"},
	} {
		r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", &alice, form(f...), e.sameOrigin())
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r.body)
	}
	got, err := e.op.Receipt(context.Background(), tok)
	require.NoError(t, err)
	require.True(t, got.Unresolved)
	require.Zero(t, e.auditRows())
}

// A failed receipt is re-armed through its form.
func TestRearmThroughTheForm(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.failed("refund-1", "account blocked")
	page := e.get(receiptPath(tok), alice)
	require.Contains(t, page, "failed for good")
	r := e.do(http.MethodPost, receiptPath(tok)+"/rearm", &alice, form("csrf", e.csrf(receiptPath(tok), alice), "reason", "INC-9: unblocked"), e.sameOrigin())
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	got, err := e.op.Receipt(context.Background(), tok)
	require.NoError(t, err)
	require.True(t, got.Rearmed())
	require.Equal(t, alice.Name, got.ResolvedBy)
}

// A dead message is requeued, and another discarded, through their forms; the outbox's pages
// show them, and the reader never gets their payload or headers.
func TestOutboxThroughTheForms(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.dead("HTTP 422", "paid/1", "paid/2")
	list := e.get("/outbox?state=dead", bob)
	require.Contains(t, list, "paid/1")
	require.Contains(t, list, "paid/2")
	require.Contains(t, e.get("/", bob), `href="/outbox?state=dead">2</a>`)

	op := e.get(messagePath("paid/1"), alice)
	require.Contains(t, op, "payload of paid/1: card 4242")
	require.Contains(t, op, "hdr-paid/1")
	reader := e.get(messagePath("paid/1"), bob)
	require.NotContains(t, reader, "card 4242", "a reader sees a payload")
	require.NotContains(t, reader, "hdr-paid/1", "a reader sees a header")

	token := e.csrf(messagePath("paid/1"), alice)
	r := e.do(http.MethodPost, "/outbox/requeue", &alice, form("csrf", token, "id", "paid/1", "reason", "INC-42: receiver fixed"), e.sameOrigin())
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	r = e.do(http.MethodPost, "/outbox/discard", &alice, form("csrf", token, "id", "paid/2", "reason", "INC-43: duplicate"), e.sameOrigin())
	require.Equal(t, http.StatusSeeOther, r.status, r.body)

	m, err := e.out.Get(context.Background(), "paid/1")
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, m.State)
	_, err = e.out.Get(context.Background(), "paid/2")
	require.ErrorIs(t, err, outbox.ErrNoMessage)
	log, err := e.op.AuditLog(context.Background(), 0, 0)
	require.NoError(t, err)
	require.Len(t, log, 2)
	for _, row := range log {
		require.Equal(t, alice.Name, row.Actor)
	}
	require.Contains(t, e.get(messagePath("paid/1"), bob), "INC-42: receiver fixed")

	// A page of one record links to the older one.
	h, err := console.New(console.Config{Operator: e.op, Users: []console.User{bob}, PageSize: 1})
	require.NoError(t, err)
	e.srv.Config.Handler = h
	newest := e.get("/audit", bob)
	require.Contains(t, newest, "INC-43: duplicate")
	require.NotContains(t, newest, "INC-42")
	older := regexp.MustCompile(`href="(/audit\?before=\d+)"`).FindStringSubmatch(newest)
	require.NotNil(t, older, "the audit page does not link to the older records")
	require.Contains(t, e.get(older[1], bob), "INC-42: receiver fixed")
}

// A result is shown, decoded with the codecs, to the operator only.
func TestResultHiddenFromTheReader(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.succeeded("order-1", chargeResult{ChargeID: "ch_secret_77"})
	require.Contains(t, e.get(receiptPath(tok), alice), "ch_secret_77")
	page := e.get(receiptPath(tok), bob)
	require.NotContains(t, page, "ch_secret_77", "a reader sees a result")
	require.Contains(t, page, "hidden: the operator role sees results")
}

// Text an attacker chose (a key's ID, an error message, an outbox message's ID, error, payload
// and headers) is rendered inert on every page that shows it.
func TestAttackerTextIsEscaped(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.failed("order-"+script, "downstream said "+script)
	e.dead("HTTP 500: "+script, "msg-"+script)
	for _, path := range []string{"/", "/receipts", "/receipts?state=failed", receiptPath(tok), "/outbox", messagePath("msg-" + script), "/audit"} {
		for _, u := range []console.User{alice, bob} {
			page := e.get(path, u)
			require.NotContains(t, strings.ToLower(page), "<script", "%s as %s renders a script", path, u.Name)
		}
	}
	require.Contains(t, e.get(receiptPath(tok), bob), "downstream said &lt;script&gt;", "the error message is not shown escaped")
	require.Contains(t, e.get(messagePath("msg-"+script), alice), "HTTP 500: &lt;script&gt;")
	r := e.do(http.MethodPost, "/outbox/requeue", &alice,
		form("csrf", e.csrf(messagePath("msg-"+script), alice), "id", "msg-"+script, "reason", "why "+script), e.sameOrigin())
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	require.NotContains(t, strings.ToLower(e.get("/audit", bob)), "<script")
	require.NotContains(t, strings.ToLower(e.get(messagePath("msg-"+script), bob)), "<script")
}

// Every response, a refusal included, carries the security headers.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, r := range []response{e.do(http.MethodGet, "/", nil, nil, nil), e.do(http.MethodGet, "/", &bob, nil, nil), e.do(http.MethodGet, "/static/console.css", &bob, nil, nil)} {
		require.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'self'")
		require.Contains(t, r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
		require.Equal(t, "DENY", r.header.Get("X-Frame-Options"))
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-referrer", r.header.Get("Referrer-Policy"))
	}
}

// InsecureLocalReader lets a loopback request without credentials read, never act, and not
// through a proxy header.
func TestInsecureLocalReader(t *testing.T) {
	t.Parallel()
	e := setup(t)
	h, err := console.New(console.Config{Operator: e.op, Outbox: e.out, InsecureLocalReader: true})
	require.NoError(t, err)
	e.srv.Config.Handler = h
	tok := e.unknown("order-1")
	page := e.do(http.MethodGet, receiptPath(tok), nil, nil, nil)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "anonymous (reader)")
	require.Equal(t, http.StatusUnauthorized, e.do(http.MethodGet, "/", nil, nil, map[string]string{"X-Forwarded-For": "203.0.113.9"}).status)
	r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", nil, form("outcome", "not-applied", "reason", "x"), e.sameOrigin())
	require.Equal(t, http.StatusForbidden, r.status)
	require.Zero(t, e.auditRows())

	// A request from another host is refused: the handler itself, called as a server would for
	// a remote client (httptest's client is always on loopback).
	for addr, want := range map[string]int{"203.0.113.9:4711": http.StatusUnauthorized, "[::1]:4711": http.StatusOK, "127.0.0.1:4711": http.StatusOK} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, want, rec.Code, "a request without credentials from %s", addr)
	}
}

// New names the setting it refuses.
func TestNewRefusesABadConfig(t *testing.T) {
	t.Parallel()
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{})
	require.NoError(t, err)
	for field, cfg := range map[string]console.Config{
		"Operator":          {Users: []console.User{alice}},
		"Users":             {Operator: op},
		"Users[0].Password": {Operator: op, Users: []console.User{{Name: "x", Password: "short", Role: console.RoleOperator}}},
		"Users[1].Name":     {Operator: op, Users: []console.User{alice, alice}},
		"Users[0].Role":     {Operator: op, Users: []console.User{{Name: "x", Password: "long-enough-pw"}}},
		"Path":              {Operator: op, Users: []console.User{alice}, Path: "/ops"},
		"InboxWindow":       {Operator: op, Users: []console.User{alice}, InboxWindow: -time.Hour},
		"InboxRetention":    {Operator: op, Users: []console.User{alice}, InboxRetention: -time.Hour},
	} {
		_, err := console.New(cfg)
		var ce *console.ConfigError
		require.ErrorAs(t, err, &ce, field)
		require.Equal(t, field, ce.Field)
	}
}

// The handler mounted under a path serves there, and links there.
func TestMountedUnderAPath(t *testing.T) {
	t.Parallel()
	e := setup(t)
	h, err := console.New(console.Config{Operator: e.op, Users: []console.User{alice}, Path: "/ops/tempotent/"})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/tempotent/", h)
	e.srv.Config.Handler = mux
	tok := e.failed("refund-1", "blocked")
	page := e.get("/ops/tempotent/receipts/"+string(tok), alice)
	require.Contains(t, page, `href="/ops/tempotent/static/console.css"`)
	require.Contains(t, page, `action="/ops/tempotent/receipts/`+string(tok)+`/rearm"`)
	require.Equal(t, http.StatusNotFound, e.do(http.MethodGet, "/ops/tempotent/outbox", &alice, nil, nil).status, "the outbox is served without an Outbox")
}
