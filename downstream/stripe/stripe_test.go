package stripe_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/downstream/paymentstest"
	"github.com/tempotent/tempotent/downstream/stripe"
	"github.com/tempotent/tempotent/keys"
)

// StripeMockVersion is the stripe-mock the tests install and run.
const StripeMockVersion = "v0.203.0"

// recorder remembers, per request, the Idempotency-Key sent and the one the server reflected,
// and adds fakepay fault headers for chosen keys.
type recorder struct {
	mu        sync.Mutex
	sent      []string
	reflected []string
	faults    map[string]string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	if req.Method == http.MethodPost {
		r.sent = append(r.sent, key)
	}
	spec := r.faults[key]
	r.mu.Unlock()
	if spec != "" {
		req = req.Clone(req.Context())
		req.Header.Set(fakepay.FaultHeader, spec)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost {
		r.mu.Lock()
		r.reflected = append(r.reflected, resp.Header.Get("Idempotency-Key"))
		r.mu.Unlock()
	}
	return resp, err
}

// The adapter passes the same conformance suite as fakepay's own client, against fakepay,
// which speaks the part of Stripe's API the adapter uses and deduplicates like Stripe.
func TestConformanceAgainstFakepay(t *testing.T) {
	paymentstest.Run(t, func(t *testing.T) paymentstest.Provider {
		srv, err := fakepay.New(nil)
		require.NoError(t, err)
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		rec := &recorder{faults: map[string]string{}}
		p := stripe.New("sk_test_fakepay", &stripe.Config{URL: hs.URL, HTTPClient: &http.Client{Transport: rec}})
		return paymentstest.Provider{
			Payments: p,
			FailNext: func(tok keys.Token) {
				rec.mu.Lock()
				rec.faults[tok.String()] = "fail_500=1"
				rec.mu.Unlock()
			},
			Charges: func(tok keys.Token) int { return srv.Ledger().ChargesByToken[tok.String()] },
			Refunds: func(tok keys.Token) int { return srv.Ledger().RefundsOfToken(tok.String()) },
		}
	})
}

// TestStripeMockReceivesOurToken runs the adapter against stripe-mock, which validates requests
// against Stripe's OpenAPI spec and reflects the Idempotency-Key it received (it does not
// deduplicate). Three attempts of one intent, as Temporal retries would make them, must all
// carry the intent's token; stripe-go's own random key must never reach the server.
func TestStripeMockReceivesOurToken(t *testing.T) {
	url := startStripeMock(t)
	rec := &recorder{}
	p := stripe.New("sk_test_123", &stripe.Config{URL: url, HTTPClient: &http.Client{Transport: rec}})

	tok := keys.Key{Namespace: "default", Tenant: "acme", Operation: "charge", ID: "order-123"}.Token()
	ctx := keys.WithToken(context.Background(), tok)
	for range 3 {
		ch, err := p.Charge(ctx, downstream.ChargeRequest{Amount: 4200, Currency: "eur", Source: "tok_visa"})
		require.NoError(t, err)
		require.NotEmpty(t, ch.ID)
	}
	refundCtx := keys.WithToken(context.Background(), keys.Key{Namespace: "default", Operation: "refund", ID: "order-123"}.Token())
	_, err := p.Refund(refundCtx, tok)
	require.NoError(t, err)

	require.Equal(t, []string{tok.String(), tok.String(), tok.String()}, rec.sent[:3])
	require.Equal(t, rec.sent, rec.reflected, "stripe-mock did not receive the key we sent")
	require.NotEqual(t, tok.String(), rec.sent[len(rec.sent)-1], "the refund reused the charge's key")

	_, err = p.Charge(context.Background(), downstream.ChargeRequest{Amount: 4200, Currency: "eur", Source: "tok_visa"})
	require.ErrorIs(t, err, downstream.ErrNoKey)
}

// startStripeMock installs stripe-mock (pinned) into the repository's bin/ if needed, starts it
// on a free port, and stops it when the test ends.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("../../bin")
	require.NoError(t, err)
	exe := filepath.Join(bin, "stripe-mock-"+StripeMockVersion)
	if _, err := os.Stat(exe); err != nil {
		dir := t.TempDir()
		cmd := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+StripeMockVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "install stripe-mock: %s", out)
		require.NoError(t, os.MkdirAll(bin, 0o755))
		require.NoError(t, os.Rename(filepath.Join(dir, "stripe-mock"), exe))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	cmd := exec.Command(exe, "-http-port", fmt.Sprint(port), "-https-port", "-1")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			conn.Close()
			return url
		}
		require.True(t, time.Now().Before(deadline), "stripe-mock did not listen on %d: %s", port, &log)
		time.Sleep(50 * time.Millisecond)
	}
}

// A breaker in the adapter's HTTP client refuses calls to a Stripe that is down; the refusal is
// a request that was never sent (retryable, the effect certainly not applied), not an unknown
// outcome that would send the workflow to reconcile.
func TestBreakerRefusalIsNotAnUnknownOutcome(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"down"}}`))
	}))
	defer srv.Close()
	tr := &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 1, Open: time.Minute}}
	p := stripe.New("sk_test_123", &stripe.Config{URL: srv.URL, HTTPClient: &http.Client{Transport: tr}})
	ctx := keys.WithToken(context.Background(), keys.Key{Namespace: "default", Operation: "charge", ID: "order-9"}.Token())

	_, err := p.Charge(ctx, downstream.ChargeRequest{Amount: 100, Currency: "eur", Source: "tok_visa"})
	require.Error(t, err)
	_, err = p.Charge(ctx, downstream.ChargeRequest{Amount: 100, Currency: "eur", Source: "tok_visa"})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	require.Equal(t, downstream.ErrTypeCircuitOpen, app.Type(), "a refusal by the breaker: %v", err)
	require.False(t, app.NonRetryable())
	require.Greater(t, app.NextRetryDelay(), time.Duration(0), "the refusal does not say when to come back")
	require.Equal(t, 1, hits, "the breaker let a call through to a host it holds open")
}
