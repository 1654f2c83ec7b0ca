package downstream_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

// echo answers with the idempotency headers it received.
func echo(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("Idempotency-Key")+"|"+r.Header.Get("PayPal-Request-Id"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func send(t *testing.T, rt http.RoundTripper, ctx context.Context, method, url string, header http.Header) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader("amount=1"))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func TestTransport(t *testing.T) {
	t.Parallel()
	srv := echo(t)
	tok := keys.Key{Namespace: "default", Operation: "charge", ID: "order-1"}.Token()
	ctx := keys.WithToken(context.Background(), tok)

	t.Run("SetsTheTokenOnUnsafeMethods", func(t *testing.T) {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			got, err := send(t, &downstream.Transport{}, ctx, m, srv.URL, nil)
			require.NoError(t, err)
			require.Equal(t, tok.String()+"|", got, m)
		}
	})

	t.Run("SafeMethodsPassWithoutKey", func(t *testing.T) {
		got, err := send(t, &downstream.Transport{}, context.Background(), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		require.Equal(t, "|", got)
	})

	t.Run("RefusesUnsafeRequestWithoutKey", func(t *testing.T) {
		var reached bool
		base := roundTripFunc(func(*http.Request) (*http.Response, error) { reached = true; return nil, errors.New("sent") })
		_, err := send(t, &downstream.Transport{Base: base}, context.Background(), http.MethodPost, srv.URL, nil)
		require.ErrorIs(t, err, downstream.ErrNoKey)
		var noKey *downstream.NoKeyError
		require.ErrorAs(t, err, &noKey)
		require.True(t, noKey.NotApplied())
		require.False(t, reached, "the unkeyed request was sent")
	})

	t.Run("NeverOverwritesTheCallersKey", func(t *testing.T) {
		got, err := send(t, &downstream.Transport{}, ctx, http.MethodPost, srv.URL, http.Header{"Idempotency-Key": {"chosen-by-caller"}})
		require.NoError(t, err)
		require.Equal(t, "chosen-by-caller|", got)
	})

	t.Run("ConfigurableHeaderAndUUIDForm", func(t *testing.T) {
		got, err := send(t, &downstream.Transport{Header: "PayPal-Request-Id", Format: keys.Token.UUID}, ctx, http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		require.Equal(t, "|"+tok.UUID(), got)
	})

	t.Run("DoesNotModifyTheCallersRequest", func(t *testing.T) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		resp, err := (&downstream.Transport{}).RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Empty(t, req.Header.Get("Idempotency-Key"))
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestCheck(t *testing.T) {
	t.Parallel()
	req := charges(t)
	for _, tc := range []struct {
		name      string
		resp      *http.Response
		err       error
		wantType  string
		retryable bool
		delay     time.Duration
		code      string
	}{
		{"ServerError", respond(502, "bad gateway", nil), nil, downstream.ErrTypeUnavailable, true, 0, ""},
		{"RateLimited", respond(429, "{}", http.Header{"Retry-After": {"7"}}), nil, downstream.ErrTypeRateLimited, true, 7 * time.Second, ""},
		{"InFlight", respond(409, `{"error":{"type":"idempotency_error","message":"in use"}}`, nil), nil, downstream.ErrTypeInFlight, true, 0, ""},
		{"Mismatch400", respond(400, `{"error":{"type":"idempotency_error","message":"same parameters"}}`, nil), nil, downstream.ErrTypeMismatch, false, 0, ""},
		{"Mismatch422", respond(422, `{"error":{"type":"idempotency_error","message":"same parameters"}}`, nil), nil, downstream.ErrTypeMismatch, false, 0, ""},
		{"Declined", respond(402, `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined."}}`, nil), nil, downstream.ErrTypeRejected, false, 0, "card_declined"},
		{"OtherClientError", respond(400, `{"error":{"type":"invalid_request_error","code":"parameter_missing","message":"Missing currency"}}`, nil), nil, downstream.ErrTypeRejected, false, 0, "parameter_missing"},
		{"NetworkAfterSend", nil, &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, downstream.ErrTypeNetwork, true, 0, ""},
		{"DialFailed", nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, downstream.ErrTypeNetwork, true, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := downstream.Check(req, tc.resp, tc.err)
			appErr := temporaltest.RequireAppError(t, err, tc.wantType, tc.retryable)
			require.Equal(t, tc.delay, appErr.NextRetryDelay())
			e, ok := downstream.As(err)
			require.True(t, ok)
			require.Equal(t, tc.code, e.Code)
			require.Equal(t, tc.name == "DialFailed", e.NotApplied(), "only a failed dial proves the request was not sent")
		})
	}
	require.NoError(t, downstream.Check(req, respond(200, "{}", nil), nil))
	err := downstream.Check(req, nil, &downstream.NoKeyError{Method: "POST", URL: "x", Header: "Idempotency-Key"})
	temporaltest.RequireAppError(t, err, downstream.ErrTypeNoKey, false)
}

// TestTransportNeverResendsOnItsOwn: net/http re-sends a request that carries an
// Idempotency-Key by itself when a reused connection breaks after the request was written.
// Whether to send again is the receipt's decision (the next attempt, with the same token, or a
// reconcile for a downstream that does not deduplicate), so the Transport turns that off: a
// provider that charged and dropped the connection sees one request, and the caller an error.
func TestTransportNeverResendsOnItsOwn(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "ok")
			return
		}
		_, _ = io.ReadAll(r.Body)
		posts.Add(1) // charged; then the connection drops before the answer
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	ctx := keys.WithToken(context.Background(), keys.Key{Namespace: "default", Operation: "charge", ID: "order-1"}.Token())

	for _, tc := range []struct {
		name   string
		body   io.Reader
		header http.Header
	}{
		{"WithBody", strings.NewReader("amount=1"), nil},
		{"WithoutBody", nil, nil},
		{"CallersOwnKey", strings.NewReader("amount=1"), http.Header{"Idempotency-Key": {"chosen-by-caller"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := &http.Client{Transport: &downstream.Transport{Base: &http.Transport{}}}
			// A first request leaves a connection to reuse: only a reused one is re-sent on.
			resp, err := client.Get(srv.URL)
			require.NoError(t, err)
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()

			before := posts.Load()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, tc.body)
			require.NoError(t, err)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			_, err = client.Do(req)
			require.Error(t, err)
			require.Equal(t, int32(1), posts.Load()-before, "the request was sent more than once")
		})
	}
}
