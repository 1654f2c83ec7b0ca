package downstream_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/outbox"
)

// clock is a breaker clock that moves only when the test says.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// switchable answers every request with its status, 200 by default, and counts them.
type switchable struct {
	*httptest.Server
	status, hits atomic.Int32
}

func newSwitchable(t *testing.T) *switchable {
	s := &switchable{}
	s.status.Store(http.StatusOK)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.WriteHeader(int(s.status.Load()))
	}))
	t.Cleanup(s.Close)
	return s
}

// call POSTs to url through client under a token and returns what Check makes of it.
func call(t *testing.T, client *http.Client, ctx context.Context, url string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(keys.WithToken(ctx, keys.Key{Namespace: "default", Operation: "charge", ID: "order-1"}.Token()),
		http.MethodPost, url, strings.NewReader("amount=1"))
	require.NoError(t, err)
	resp, err := client.Do(req)
	if err := downstream.Check(req, resp, err); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// requireOpen requires err to be the refusal of an open circuit for srv, retryable after
// retryAt with a next retry delay from retryAt to twice as far.
func requireOpen(t *testing.T, err error, srv *httptest.Server, retryAt time.Time) {
	t.Helper()
	before := time.Until(retryAt)
	appErr := temporaltest.RequireAppError(t, err, downstream.ErrTypeCircuitOpen, true)
	var open *downstream.CircuitOpenError
	require.ErrorAs(t, err, &open)
	require.Equal(t, strings.TrimPrefix(srv.URL, "http://"), open.Host)
	require.Equal(t, retryAt, open.RetryAt)
	require.GreaterOrEqual(t, appErr.NextRetryDelay(), time.Until(retryAt), "a retry before RetryAt would be refused again")
	require.LessOrEqual(t, appErr.NextRetryDelay(), 2*before)
	e, ok := downstream.As(err)
	require.True(t, ok)
	require.True(t, e.NotApplied(), "a refused request was never sent")
}

// TestBreakerHostDownAndBack: a host that answers 503 Failures times in a row is not called
// again until the open period is over, while another host is called as usual; then one probe
// goes, and when it fails the circuit opens again for twice as long; when it succeeds the
// circuit closes.
func TestBreakerHostDownAndBack(t *testing.T) {
	t.Parallel()
	flaky, healthy := newSwitchable(t), newSwitchable(t)
	clk := newClock()
	client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 3, Open: 10 * time.Second, Now: clk.Now}}}
	ctx := context.Background()

	flaky.status.Store(http.StatusServiceUnavailable)
	for range 3 {
		temporaltest.RequireAppError(t, call(t, client, ctx, flaky.URL), downstream.ErrTypeUnavailable, true)
	}
	requireOpen(t, call(t, client, ctx, flaky.URL), flaky.Server, clk.Now().Add(10*time.Second))
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 20 {
		err := call(t, client, ctx, flaky.URL)
		requireOpen(t, err, flaky.Server, clk.Now().Add(10*time.Second))
		delay := temporaltest.RequireAppError(t, err, downstream.ErrTypeCircuitOpen, true).NextRetryDelay()
		lo, hi = min(lo, delay), max(hi, delay)
	}
	// Drawn from 10 s to 20 s: twenty draws all within one second of each other would be chance
	// of 10^-18.
	require.Greater(t, hi-lo, time.Second, "the attempts refused together are told to come back together")
	require.Equal(t, int32(3), flaky.hits.Load(), "a request went to a host whose circuit is open")
	require.NoError(t, call(t, client, ctx, healthy.URL), "another host's circuit is its own")

	clk.Add(10 * time.Second) // half-open: one probe goes, and fails
	temporaltest.RequireAppError(t, call(t, client, ctx, flaky.URL), downstream.ErrTypeUnavailable, true)
	require.Equal(t, int32(4), flaky.hits.Load())
	requireOpen(t, call(t, client, ctx, flaky.URL), flaky.Server, clk.Now().Add(20*time.Second))
	clk.Add(19 * time.Second)
	requireOpen(t, call(t, client, ctx, flaky.URL), flaky.Server, clk.Now().Add(time.Second))
	require.Equal(t, int32(4), flaky.hits.Load(), "a failed probe opens the circuit again, for twice as long")

	flaky.status.Store(http.StatusOK)
	clk.Add(time.Second)
	require.NoError(t, call(t, client, ctx, flaky.URL), "the probe")
	for range 5 {
		require.NoError(t, call(t, client, ctx, flaky.URL), "a successful probe closes the circuit")
	}
	require.Equal(t, int32(10), flaky.hits.Load())
	require.Equal(t, int32(1), healthy.hits.Load())
}

// TestBreakerHalfOpenLetsOnlyTheProbesThrough: when the open period is over, of many requests
// at once only Probes reach the host; the others are refused until a probe has answered.
func TestBreakerHalfOpenLetsOnlyTheProbesThrough(t *testing.T) {
	t.Parallel()
	const probes, callers = 2, 24
	var failing atomic.Bool
	failing.Store(true)
	arrived, release := make(chan struct{}, callers), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(srv.Close)
	clk := newClock()
	client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 1, Open: time.Second, Probes: probes, Now: clk.Now}}}
	ctx := context.Background()
	temporaltest.RequireAppError(t, call(t, client, ctx, srv.URL), downstream.ErrTypeUnavailable, true)
	failing.Store(false)
	clk.Add(time.Second)

	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { errs <- call(t, client, ctx, srv.URL) })
	}
	for range probes {
		<-arrived
	}
	for range callers - probes {
		temporaltest.RequireAppError(t, <-errs, downstream.ErrTypeCircuitOpen, true, "only the probes may go")
	}
	require.Empty(t, arrived, "more requests than Probes reached the host")
	close(release)
	for range probes {
		require.NoError(t, <-errs)
	}
	wg.Wait()
	require.Empty(t, arrived)
	go func() { <-arrived }() // the next request, which a closed circuit lets through
	require.NoError(t, call(t, client, ctx, srv.URL), "a successful probe closes the circuit")
}

// TestBreakerCountsWhatSaysTheHostIsDown: 5xx, 429, a refused connection and a timeout are
// failures; any other answer, a 4xx among them, says the host is up; a request the caller
// cancelled says nothing. With Failures 1, the request after a failure is refused.
func TestBreakerCountsWhatSaysTheHostIsDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		fails  bool
	}{
		{500, true}, {502, true}, {503, true}, {429, true},
		{200, false}, {201, false}, {302, false}, {400, false}, {402, false}, {404, false}, {409, false}, {422, false},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := newSwitchable(t)
			srv.status.Store(int32(tc.status))
			client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 1}}}
			_ = call(t, client, context.Background(), srv.URL)
			_ = call(t, client, context.Background(), srv.URL)
			require.Equal(t, map[bool]int32{true: 1, false: 2}[tc.fails], srv.hits.Load())
		})
	}
	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		srv := newSwitchable(t)
		srv.Close()
		client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 1}}}
		temporaltest.RequireAppError(t, call(t, client, context.Background(), srv.URL), downstream.ErrTypeNetwork, true)
		temporaltest.RequireAppError(t, call(t, client, context.Background(), srv.URL), downstream.ErrTypeCircuitOpen, true)
	})
	// cancelOnArrival returns a context cancelled when a request reaches the server: a request
	// that should have been refused fails rather than hangs.
	cancelOnArrival := func(t *testing.T, arrived <-chan struct{}) context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			select {
			case <-arrived:
				cancel()
			case <-ctx.Done():
			}
		}()
		return ctx
	}
	hanging := func(t *testing.T) (*httptest.Server, <-chan struct{}) {
		arrived := make(chan struct{}, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // then the server watches the connection, and ends r's context when it closes
			arrived <- struct{}{}
			<-r.Context().Done()
		}))
		t.Cleanup(srv.Close)
		return srv, arrived
	}
	t.Run("CancelledThenTimeout", func(t *testing.T) {
		t.Parallel()
		srv, arrived := hanging(t)
		client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 1}}}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-arrived; cancel() }()
		temporaltest.RequireAppError(t, call(t, client, ctx, srv.URL), downstream.ErrTypeNetwork, true)
		// The caller gave up: that says nothing of the host, so the next request goes. Its
		// deadline passes while the host says nothing: a failure.
		go func() { <-arrived }()
		dctx, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer stop()
		require.ErrorIs(t, call(t, client, dctx, srv.URL), context.DeadlineExceeded)
		temporaltest.RequireAppError(t, call(t, client, cancelOnArrival(t, arrived), srv.URL), downstream.ErrTypeCircuitOpen, true,
			"a timeout opens the circuit")
	})
}

// TestBreakerOffUnlessEnabled: without Breaker.Enabled, every request is sent however often the
// host failed, whatever the other settings say.
func TestBreakerOffUnlessEnabled(t *testing.T) {
	t.Parallel()
	srv := newSwitchable(t)
	srv.status.Store(http.StatusServiceUnavailable)
	client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Failures: 1}}}
	for range 10 {
		temporaltest.RequireAppError(t, call(t, client, context.Background(), srv.URL), downstream.ErrTypeUnavailable, true)
	}
	require.Equal(t, int32(10), srv.hits.Load())
}

// TestBreakerConfigRefused: a Breaker setting that cannot work is refused, unsent, with a
// *ConfigError naming the field, which Check makes non-retryable.
func TestBreakerConfigRefused(t *testing.T) {
	t.Parallel()
	srv := newSwitchable(t)
	for field, cfg := range map[string]downstream.BreakerConfig{
		"Transport.Breaker.Failures": {Failures: -1},
		"Transport.Breaker.Open":     {Open: -time.Second},
		"Transport.Breaker.OpenMax":  {Open: time.Minute, OpenMax: time.Second},
		"Transport.Breaker.Probes":   {Probes: -2},
	} {
		tr := &downstream.Transport{Breaker: cfg}
		var config *downstream.ConfigError
		require.ErrorAs(t, tr.Validate(), &config, field)
		require.Equal(t, field, config.Field)
		require.Contains(t, config.Error(), "downstream."+field+" is ")
		err := call(t, &http.Client{Transport: tr}, context.Background(), srv.URL)
		temporaltest.RequireAppError(t, err, downstream.ErrTypeMisconfigured, false, field)
	}
	require.Zero(t, srv.hits.Load())
	require.NoError(t, (&downstream.Transport{}).Validate(), "the zero Transport is valid")
}

// TestBreakerInHTTPPublisher: an outbox.HTTPPublisher whose Client shares one Transport stops
// calling a receiver that is down; its refusal is a retryable failure, not a dead message.
func TestBreakerInHTTPPublisher(t *testing.T) {
	t.Parallel()
	srv := newSwitchable(t)
	srv.status.Store(http.StatusBadGateway)
	pub := &outbox.HTTPPublisher{URL: srv.URL, Client: &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 2}}}}
	d := outbox.Delivery{Message: outbox.Message{ID: "m1", Topic: "t", Payload: []byte("{}")}, Attempt: 1}
	for range 2 {
		require.Error(t, pub.Publish(context.Background(), d))
	}
	err := pub.Publish(context.Background(), d)
	var open *downstream.CircuitOpenError
	require.ErrorAs(t, err, &open)
	require.False(t, outbox.IsPermanent(err), "an open circuit is passing: the message is retried later")
	require.Equal(t, int32(2), srv.hits.Load())
}

// TestBreakerCountsAPanicAsAFailure: a Base that panics during a probe does not leave the probe's
// place taken forever: the panic goes on to the caller, and the circuit opens again, for twice
// as long, as after any failed probe.
func TestBreakerCountsAPanicAsAFailure(t *testing.T) {
	t.Parallel()
	clk := newClock()
	var panics atomic.Bool
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if panics.Load() {
			panic("base transport bug")
		}
		return respond(http.StatusServiceUnavailable, "", nil), nil
	})
	tr := &downstream.Transport{Base: base, Breaker: downstream.BreakerConfig{Enabled: true, Failures: 1, Open: time.Second, Now: clk.Now}}
	client := &http.Client{Transport: tr}
	temporaltest.RequireAppError(t, call(t, client, context.Background(), "http://provider.test/v1/charges"), downstream.ErrTypeUnavailable, true)
	clk.Add(time.Second)
	panics.Store(true)
	require.PanicsWithValue(t, "base transport bug", func() { _ = call(t, client, context.Background(), "http://provider.test/v1/charges") })
	err := call(t, client, context.Background(), "http://provider.test/v1/charges")
	var open *downstream.CircuitOpenError
	require.ErrorAs(t, err, &open)
	require.Equal(t, clk.Now().Add(2*time.Second), open.RetryAt, "the panicking probe counted as a failed one")
}
