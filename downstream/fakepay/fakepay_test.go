package fakepay_test

import (
	"context"
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

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/downstream/paymentstest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

func start(t *testing.T, cfg *fakepay.Config) (*fakepay.Server, *fakepay.Client) {
	t.Helper()
	srv, err := fakepay.New(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Close) // runs first: stops the webhook sender while its receiver is still up
	return srv, fakepay.NewClient(hs.URL)
}

// faultClient sends a fault header with every request of one token.
type faultTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	faults map[string]string // token → fault header
}

func (f *faultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	spec := f.faults[r.Header.Get(downstream.HeaderDefault)]
	f.mu.Unlock()
	if spec != "" {
		r = r.Clone(r.Context())
		r.Header.Set(fakepay.FaultHeader, spec)
	}
	return f.base.RoundTrip(r)
}

func TestConformance(t *testing.T) {
	paymentstest.Run(t, func(t *testing.T) paymentstest.Provider {
		srv, client := start(t, nil)
		ft := &faultTransport{base: http.DefaultTransport, faults: map[string]string{}}
		client.HTTP = &http.Client{Transport: &downstream.Transport{Base: ft}}
		return paymentstest.Provider{
			Payments: client,
			FailNext: func(tok keys.Token) {
				ft.mu.Lock()
				ft.faults[tok.String()] = "fail_500=1"
				ft.mu.Unlock()
			},
			Charges: func(tok keys.Token) int { return srv.Ledger().ChargesByToken[tok.String()] },
			Refunds: func(tok keys.Token) int { return srv.Ledger().RefundsOfToken(tok.String()) },
		}
	})
}

var req = downstream.ChargeRequest{Amount: 1000, Currency: "eur", Source: "tok_visa"}

func keyed(id string) (context.Context, keys.Token) {
	tok := keys.Key{Namespace: "default", Operation: "charge", ID: id}.Token()
	return keys.WithToken(context.Background(), tok), tok
}

func TestFaults(t *testing.T) {
	t.Parallel()

	t.Run("RateLimitCarriesRetryAfter", func(t *testing.T) {
		t.Parallel()
		srv, client := start(t, &fakepay.Config{Faults: fakepay.Faults{RateLimit: 1, RetryAfter: 3 * time.Second}})
		ctx, tok := keyed("rl")
		_, err := client.Charge(ctx, req)
		appErr := temporaltest.RequireAppError(t, err, downstream.ErrTypeRateLimited, true)
		require.Equal(t, 3*time.Second, appErr.NextRetryDelay())
		_, err = client.Charge(ctx, req)
		require.NoError(t, err)
		require.Equal(t, 1, srv.Ledger().ChargesByToken[tok.String()])
	})

	t.Run("ConcurrentDuplicateGets409", func(t *testing.T) {
		t.Parallel()
		srv, client := start(t, &fakepay.Config{Faults: fakepay.Faults{Slow: 300 * time.Millisecond}})
		ctx, tok := keyed("inflight")
		errs := make(chan error, 2)
		go func() { _, err := client.Charge(ctx, req); errs <- err }()
		time.Sleep(100 * time.Millisecond)
		_, err := client.Charge(ctx, req)
		temporaltest.RequireAppError(t, err, downstream.ErrTypeInFlight, true)
		require.NoError(t, <-errs)
		require.Equal(t, 1, srv.Ledger().ChargesByToken[tok.String()])
		require.Equal(t, 1, srv.Ledger().ConflictsByKey[tok.String()])
	})

	t.Run("DropAfterApplyIsAmbiguousThenReplays", func(t *testing.T) {
		t.Parallel()
		srv, client := start(t, &fakepay.Config{Faults: fakepay.Faults{Drop: 1}})
		ctx, tok := keyed("drop")
		_, err := client.Charge(ctx, req)
		temporaltest.RequireAppError(t, err, downstream.ErrTypeNetwork, true)
		e, ok := downstream.As(err)
		require.True(t, ok)
		require.True(t, e.Sent, "a dropped answer must count as possibly applied")
		require.False(t, e.NotApplied())
		require.Equal(t, 1, srv.Ledger().ChargesByToken[tok.String()], "the charge was applied before the drop")

		ch, err := client.Charge(ctx, req) // the retry, same key: the stored response
		require.NoError(t, err)
		require.Equal(t, srv.Ledger().Charges[0].ID, ch.ID)
		require.Equal(t, 1, srv.Ledger().ChargesByToken[tok.String()])
	})

	t.Run("DeclineIsStoredAndReplayed", func(t *testing.T) {
		t.Parallel()
		srv, client := start(t, nil)
		ctx, _ := keyed("decline")
		declined := req
		declined.Source = "tok_chargeDeclined"
		for range 2 {
			_, err := client.Charge(ctx, declined)
			e, ok := downstream.As(err)
			require.True(t, ok)
			require.Equal(t, downstream.KindRejected, e.Kind)
			require.Equal(t, "card_declined", e.Code)
		}
		require.Empty(t, srv.Ledger().Charges)
	})

	t.Run("KeysExpireAfterRetention", func(t *testing.T) {
		t.Parallel()
		srv, client := start(t, &fakepay.Config{Retention: 50 * time.Millisecond})
		ctx, _ := keyed("expire")
		_, err := client.Charge(ctx, req)
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
		changed := req
		changed.Amount = 2000 // allowed: the key was forgotten
		_, err = client.Charge(ctx, changed)
		require.NoError(t, err)
		require.Len(t, srv.Ledger().Charges, 2)
	})

	t.Run("IgnoreKeysChargesEveryRequest", func(t *testing.T) {
		t.Parallel()
		srv, client := start(t, &fakepay.Config{Faults: fakepay.Faults{IgnoreKeys: true}})
		ctx, tok := keyed("ignore")
		first, err := client.Charge(ctx, req)
		require.NoError(t, err)
		second, err := client.Charge(ctx, req)
		require.NoError(t, err)
		require.NotEqual(t, first.ID, second.ID, "a provider that ignores keys charges again")
		l := srv.Ledger()
		require.Equal(t, 2, l.ChargesByToken[tok.String()])
		require.Equal(t, 2, l.RequestsByKey[tok.String()])
		found, ok, err := client.Lookup(ctx, tok)
		require.NoError(t, err)
		require.True(t, ok, "the token in the metadata finds the charge")
		require.Equal(t, tok.String(), found.Token)
	})

	t.Run("ParseFaults", func(t *testing.T) {
		t.Parallel()
		f, err := fakepay.ParseFaults("fail_500=2, rate_limit=1, retry_after=2s, slow=10ms, decline, drop=1, ignore_keys")
		require.NoError(t, err)
		require.Equal(t, fakepay.Faults{Fail500: 2, RateLimit: 1, RetryAfter: 2 * time.Second, Slow: 10 * time.Millisecond, Decline: true, Drop: 1, IgnoreKeys: true}, f)
		f, err = fakepay.ParseFaults("webhook_duplicate=2,webhook_delay=300ms,webhook_reorder,webhook_fail=1")
		require.NoError(t, err)
		require.Equal(t, fakepay.Faults{WebhookDuplicate: 2, WebhookDelay: 300 * time.Millisecond, WebhookReorder: true, WebhookFail: 1}, f)
		_, err = fakepay.ParseFaults("explode")
		require.ErrorContains(t, err, "unknown fault")
	})
}

func TestStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	srv, client := start(t, &fakepay.Config{StatePath: path})
	ctx, tok := keyed("persist")
	first, err := client.Charge(ctx, req)
	require.NoError(t, err)

	restarted, client2 := start(t, &fakepay.Config{StatePath: path})
	again, err := client2.Charge(ctx, req)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "the restarted provider forgot the key")
	require.Equal(t, srv.Ledger().Charges, restarted.Ledger().Charges)
	require.Equal(t, 1, restarted.Ledger().ChargesByToken[tok.String()])
}

// TestStandaloneProcess runs the fakepay command, kills it with SIGKILL and starts it again on
// the same state file: the ledger and the key memory survive.
func TestStandaloneProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakepay")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/fakepay").CombinedOutput()
	require.NoError(t, err, "%s", out)
	state := filepath.Join(dir, "state.json")

	startProcess := func() (*exec.Cmd, string) {
		cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-state", state)
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		_, err = proc.Start(cmd) // leashed: it dies with this test binary
		require.NoError(t, err)
		buf := make([]byte, 4096)
		var log strings.Builder
		for !strings.Contains(log.String(), "/ledger") {
			n, err := stderr.Read(buf)
			require.NoError(t, err, "fakepay exited: %s", log.String())
			log.WriteString(string(buf[:n]))
		}
		_, rest, _ := strings.Cut(log.String(), "addr=http://")
		addr, _, _ := strings.Cut(rest, " ")
		return cmd, "http://" + addr
	}

	cmd, url := startProcess()
	ctx, tok := keyed("process")
	first, err := fakepay.NewClient(url).Charge(ctx, req)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Signal(os.Kill))
	_ = cmd.Wait()

	cmd, url = startProcess()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	client := fakepay.NewClient(url)
	again, err := client.Charge(ctx, req)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	ledger, err := client.Ledger(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, ledger.ChargesByToken[tok.String()])
}
