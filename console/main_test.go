package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/console"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// TestMain fails the test binary if a goroutine outlives the tests (the crashed attempts, the
// test servers).
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// The users of every test's console.
var (
	alice = console.User{Name: "alice@example.com", Password: "alice-operator-pw", Role: console.RoleOperator}
	bob   = console.User{Name: "bob@example.com", Password: "bob-reader-password", Role: console.RoleReader}
)

// script is what an attacker puts wherever the console shows text it did not write.
const script = `<script>alert("pwned")</script>`

// env is a console on a fresh schema, served by a real HTTP server.
type env struct {
	t      *testing.T
	srv    *httptest.Server
	store  *activity.Store
	op     *operator.Client
	out    *outbox.Outbox
	schema string
}

// setup returns a console with alice (operator) and bob (reader), on a migrated schema whose
// store seals results (receipttest.Rot13Codec), as the console's operator client does.
func setup(t *testing.T) *env {
	t.Helper()
	schema := pgtest.Schema(t)
	codecs := []converter.PayloadCodec{receipttest.Rot13Codec{}}
	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema, Codecs: codecs})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema, Codecs: codecs})
	require.NoError(t, err)
	out, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: schema})
	require.NoError(t, err)
	// The security tests send many wrong credentials from one address: the sign-in limiter,
	// which would answer them 429, has tests of its own (signin_test.go).
	h, err := console.New(console.Config{Operator: op, Outbox: out, Inbox: pgtest.Pool(t), Users: []console.User{alice, bob},
		FailedSignIns: console.SignInLimit{Burst: -1}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, store: store, op: op, out: out, schema: schema}
}

// chargeResult is what the charges of these tests return.
type chargeResult struct {
	ChargeID string `json:"charge_id"`
}

func (e *env) call(id string) activity.Call {
	e.t.Helper()
	fp, err := keys.FingerprintOf(map[string]string{"id": id})
	require.NoError(e.t, err)
	return activity.Call{Key: keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: id}, Fingerprint: fp, Lease: 20 * time.Millisecond}
}

// unknown leaves the receipt of intent id with an unknown outcome: an attempt charges and dies,
// and the next finds a downstream that does not deduplicate.
func (e *env) unknown(id string) keys.Token {
	e.t.Helper()
	ctx := context.Background()
	c := e.call(id)
	receipttest.CrashAfterEffect(ctx, e.store, c, func(keys.Token) {})
	_, err := receipttest.DoUntilDone(ctx, e.store, c, func(context.Context) (chargeResult, error) { return chargeResult{}, nil })
	require.ErrorAs(e.t, err, new(*activity.OutcomeUnknownError))
	return c.Key.Token()
}

// failed leaves the receipt of intent id failed for good with message.
func (e *env) failed(id, message string) keys.Token {
	e.t.Helper()
	c := e.call(id)
	_, err := activity.Do(context.Background(), e.store, c, func(context.Context) (chargeResult, error) {
		return chargeResult{}, temporal.NewNonRetryableApplicationError(message, "Rejected", nil)
	})
	require.Error(e.t, err)
	return c.Key.Token()
}

// succeeded records result for intent id.
func (e *env) succeeded(id string, result chargeResult) keys.Token {
	e.t.Helper()
	c := e.call(id)
	_, err := activity.Do(context.Background(), e.store, c, func(context.Context) (chargeResult, error) { return result, nil })
	require.NoError(e.t, err)
	return c.Key.Token()
}

// dead puts the messages ids and has a receiver refuse them for good with lastError.
func (e *env) dead(lastError string, ids ...string) {
	e.t.Helper()
	ctx := context.Background()
	require.NoError(e.t, pgx.BeginFunc(ctx, pgtest.Pool(e.t), func(tx pgx.Tx) error {
		for _, id := range ids {
			m := outbox.Message{ID: id, Topic: "order.paid", OrderingKey: "key-" + id, Payload: []byte("payload of " + id + ": card 4242"),
				Headers: map[string]string{"X-Secret": "hdr-" + id}}
			if err := e.out.Put(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}))
	d, err := outbox.NewDispatcher(e.out, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		return outbox.Permanent(errors.New(lastError))
	}), nil)
	require.NoError(e.t, err)
	_, err = d.DispatchOnce(ctx)
	require.NoError(e.t, err)
}

// auditRows counts the audit log's rows.
func (e *env) auditRows() int {
	e.t.Helper()
	var n int
	require.NoError(e.t, pgtest.Pool(e.t).QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{e.schema, "audit"}.Sanitize()).Scan(&n))
	return n
}

// response is what a request got.
type response struct {
	status int
	body   string
	header http.Header
}

// do sends a request as user (nil: without credentials); header adds headers.
func (e *env) do(method, path string, user *console.User, form url.Values, header map[string]string) response {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	require.NoError(e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != nil {
		req.SetBasicAuth(user.Name, user.Password)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return response{status: res.StatusCode, body: string(b), header: res.Header}
}

// get reads a page as user and requires it to be served.
func (e *env) get(path string, user console.User) string {
	e.t.Helper()
	r := e.do(http.MethodGet, path, &user, nil, nil)
	require.Equal(e.t, http.StatusOK, r.status, "GET %s as %s: %s", path, user.Name, r.body)
	return r.body
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the forms on the page at path, as user reads it.
func (e *env) csrf(path string, user console.User) string {
	e.t.Helper()
	m := csrfRe.FindStringSubmatch(e.get(path, user))
	require.NotNil(e.t, m, "the page %s shows %s no form", path, user.Name)
	return m[1]
}

// sameOrigin is what a browser sends with a form the console's own page submitted.
func (e *env) sameOrigin() map[string]string {
	return map[string]string{"Origin": e.srv.URL, "Sec-Fetch-Site": "same-origin"}
}

func receiptPath(tok keys.Token) string { return "/receipts/" + string(tok) }

func messagePath(id string) string { return "/outbox/message?id=" + url.QueryEscape(id) }

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
