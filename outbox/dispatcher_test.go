package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

var quiet = slog.New(slog.DiscardHandler)

func newDispatcher(t *testing.T, o *outbox.Outbox, p outbox.Publisher, cfg outbox.DispatcherConfig) *outbox.Dispatcher {
	t.Helper()
	cfg.Logger = quiet
	cfg.BackoffMin = max(cfg.BackoffMin, time.Millisecond)
	cfg.BackoffMax = max(cfg.BackoffMax, 10*time.Millisecond)
	d, err := outbox.NewDispatcher(o, p, &cfg)
	require.NoError(t, err)
	return d
}

// drain calls DispatchOnce until n messages are delivered or dead, or fails after 30 s.
func drain(t *testing.T, ctx context.Context, d *outbox.Dispatcher, o *outbox.Outbox) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := d.DispatchOnce(ctx)
		require.NoError(t, err)
		st, err := o.Stats(ctx)
		require.NoError(t, err)
		return st.Pending == 0
	}, 30*time.Second, 2*time.Millisecond)
}

func TestDispatchDeliversAndMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	var msgs []outbox.Message
	for i := range 250 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("m", i), Topic: "t", Payload: []byte(fmt.Sprint(i)), Headers: map[string]string{"n": fmt.Sprint(i)}})
	}
	put(t, ctx, o, msgs...)
	r := newRecorder()
	var headersOK atomic.Bool
	headersOK.Store(true)
	r.fail = func(d outbox.Delivery) error {
		if d.Headers["n"] != string(d.Payload) || d.Attempt != 1 || d.CreatedAt.IsZero() {
			headersOK.Store(false)
		}
		return nil
	}
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{Batch: 100})
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 100, n, "one claim takes one batch")
	drain(t, ctx, d, o)

	published, _, overlaps := r.snapshot()
	require.Len(t, published, 250)
	for id, times := range published {
		require.Equal(t, 1, times, id)
	}
	require.Empty(t, overlaps)
	require.True(t, headersOK.Load(), "a delivery did not carry its message's payload, headers, attempt and creation time")
	require.Equal(t, row{State: "delivered", Attempts: 1}, rowOf(t, name, "m7"))
}

func TestDispatchRetriesWithBackoffThenDelivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "flaky", Topic: "t"})
	r := newRecorder()
	r.fail = func(d outbox.Delivery) error {
		if d.Attempt < 3 {
			return fmt.Errorf("receiver down (attempt %d)", d.Attempt)
		}
		return nil
	}
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{BackoffMin: 300 * time.Millisecond, BackoffMax: 300 * time.Millisecond})
	_, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, row{State: "pending", Attempts: 1, Error: "receiver down (attempt 1)"}, rowOf(t, name, "flaky"))
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a failed message was claimed again before its backoff ended")

	drain(t, ctx, d, o)
	require.Equal(t, "delivered", rowOf(t, name, "flaky").State)
	require.Equal(t, 3, rowOf(t, name, "flaky").Attempts)
}

func TestPoisonMessagesEndDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o,
		outbox.Message{ID: "always-fails", Topic: "t"},
		outbox.Message{ID: "permanent", Topic: "t"},
		outbox.Message{ID: "kills-its-dispatcher", Topic: "t"},
		outbox.Message{ID: "panics", Topic: "t"},
		outbox.Message{ID: "fine", Topic: "t"})
	// A message claimed MaxAttempts times whose dispatcher never recorded an outcome (it was
	// killed each time): the attempts were counted at claim, and the lease has ended.
	_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".outbox SET attempts = 4, lease_until = now() - interval '1 second', claimed_by = 'dead-process' WHERE id = 'kills-its-dispatcher'")
	require.NoError(t, err)

	r := newRecorder()
	r.fail = func(d outbox.Delivery) error {
		switch d.ID {
		case "always-fails":
			return errors.New("500 from the receiver")
		case "permanent":
			return outbox.Permanent(errors.New("the receiver does not know this topic"))
		case "kills-its-dispatcher":
			return errors.New("published a message that was out of attempts")
		case "panics":
			panic("a publisher bug this message triggers")
		}
		return nil
	}
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{MaxAttempts: 4})
	drain(t, ctx, d, o)

	require.Equal(t, row{State: "dead", Attempts: 4, Error: "500 from the receiver"}, rowOf(t, name, "always-fails"))
	require.Equal(t, row{State: "dead", Attempts: 1, Error: "the receiver does not know this topic"}, rowOf(t, name, "permanent"))
	killer := rowOf(t, name, "kills-its-dispatcher")
	require.Equal(t, "dead", killer.State)
	require.Contains(t, killer.Error, "claimed 4 times without a recorded outcome")
	require.NotContains(t, killer.Error, "out of attempts", "a message out of attempts was published")
	require.Equal(t, row{State: "dead", Attempts: 4, Error: "outbox: the publisher panicked: a publisher bug this message triggers"}, rowOf(t, name, "panics"))
	require.Equal(t, "delivered", rowOf(t, name, "fine").State)
	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Dead)
}

// Ordered messages are published one at a time per key, in order, even when one fails and is
// retried, and with several dispatchers at once; a dead message holds its key back until it is
// discarded.
func TestOrderedDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	const keys, perKey = 5, 12
	var msgs []outbox.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("k%d-%02d", k, i), Topic: "t", OrderingKey: fmt.Sprint("k", k)})
		}
	}
	put(t, ctx, o, msgs...)
	r := newRecorder()
	r.hold = 2 * time.Millisecond
	var failed sync.Map
	r.fail = func(d outbox.Delivery) error {
		if _, seen := failed.LoadOrStore(d.ID, true); !seen && d.ID[len(d.ID)-1] == '3' {
			return errors.New("fails once")
		}
		return nil
	}
	var wg sync.WaitGroup
	for range 3 {
		d := newDispatcher(t, o, r, outbox.DispatcherConfig{Batch: 4, Concurrency: 4})
		wg.Go(func() { drain(t, ctx, d, o) })
	}
	wg.Wait()

	_, byKey, overlaps := r.snapshot()
	require.Empty(t, overlaps, "a key had two messages in flight, or a message was published twice at once")
	for k := range keys {
		var want []string
		for i := range perKey {
			want = append(want, fmt.Sprintf("k%d-%02d", k, i))
		}
		require.Equal(t, want, byKey[fmt.Sprint("k", k)])
	}

	// A dead message holds its key back; unordered messages and other keys go on.
	put(t, ctx, o,
		outbox.Message{ID: "poison", Topic: "t", OrderingKey: "p"},
		outbox.Message{ID: "behind", Topic: "t", OrderingKey: "p"},
		outbox.Message{ID: "free", Topic: "t"})
	r.fail = func(d outbox.Delivery) error {
		if d.ID == "poison" {
			return outbox.Permanent(errors.New("malformed"))
		}
		return nil
	}
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{})
	for range 3 {
		_, err := d.DispatchOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, "dead", rowOf(t, name, "poison").State)
	require.Equal(t, "pending", rowOf(t, name, "behind").State)
	require.Equal(t, "delivered", rowOf(t, name, "free").State)
	require.NoError(t, o.Discard(ctx, "poison"))
	drain(t, ctx, d, o)
	require.Equal(t, "delivered", rowOf(t, name, "behind").State)
}

// Several dispatchers on one outbox: every message is delivered, none is published by two calls
// at once, and nearly none twice (only a lost claim could do that, and none is lost here).
func TestConcurrentDispatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, _ := setup(t, nil)
	const n = 400
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("m", i), Topic: "t"})
	}
	put(t, ctx, o, msgs...)
	r := newRecorder()
	r.hold = time.Millisecond
	var wg sync.WaitGroup
	for range 4 {
		d := newDispatcher(t, o, r, outbox.DispatcherConfig{Batch: 10, Concurrency: 4})
		wg.Go(func() { drain(t, ctx, d, o) })
	}
	wg.Wait()
	published, _, overlaps := r.snapshot()
	require.Empty(t, overlaps)
	require.Len(t, published, n)
	for id, times := range published {
		require.Equal(t, 1, times, id)
	}
}

// A dispatcher whose claim ended while it was publishing (it was paused past its lease) cannot
// record the result: the dispatcher that claimed the message after it owns it.
func TestLostClaimCannotMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "m", Topic: "t"})

	release := make(chan struct{})
	entered := make(chan struct{})
	slow := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		close(entered)
		<-release
		return errors.New("the slow attempt failed, late")
	})
	first := newDispatcher(t, o, slow, outbox.DispatcherConfig{Name: "first"})
	done := make(chan error, 1)
	go func() { _, err := first.DispatchOnce(ctx); done <- err }()
	<-entered
	_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".outbox SET lease_until = now() - interval '1 second'")
	require.NoError(t, err)

	second := newDispatcher(t, o, newRecorder(), outbox.DispatcherConfig{Name: "second"})
	claimed, err := second.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, claimed)
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, row{State: "delivered", Attempts: 2}, rowOf(t, name, "m"), "the first dispatcher's late failure overwrote the second's delivery")
}

// Run wakes on Put's notification: with polling all but off, a message is still delivered.
func TestRunWakesOnNotify(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	o, _ := setup(t, nil)
	r := newRecorder()
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{Poll: time.Hour, Maintenance: time.Hour})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	// The first round runs at start; give the listener time to LISTEN before putting.
	time.Sleep(300 * time.Millisecond)
	put(t, ctx, o, outbox.Message{ID: "woken", Topic: "t"})
	require.Eventually(t, func() bool {
		published, _, _ := r.snapshot()
		return published["woken"] == 1
	}, 10*time.Second, 10*time.Millisecond, "Run did not wake on the notification")

	// PutOnce wakes it too, with the wake-up it sends after its commit: the listener is up (it
	// woke Run above), and the poll is an hour away.
	_, err := o.PutOnce(ctx, pgtest.Pool(t), outbox.InboxRecord{Consumer: "webhook/test"}, outbox.Message{ID: "woken once", Topic: "t"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		published, _, _ := r.snapshot()
		return published["woken once"] == 1
	}, 10*time.Second, 10*time.Millisecond, "Run did not wake on PutOnce's notification")
}

func TestTopicsFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "a", Topic: "mine"}, outbox.Message{ID: "b", Topic: "theirs"})
	d := newDispatcher(t, o, newRecorder(), outbox.DispatcherConfig{Topics: []string{"mine"}})
	_, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, "delivered", rowOf(t, name, "a").State)
	require.Equal(t, "pending", rowOf(t, name, "b").State)
}

func TestNewDispatcherRefusesBadConfig(t *testing.T) {
	t.Parallel()
	o, _ := setup(t, nil)
	for _, cfg := range []outbox.DispatcherConfig{
		{Lease: time.Second, PublishTimeout: time.Second},
		{Lease: 10 * time.Second, PublishTimeout: 9 * time.Second}, // no tenth left to mark the result
		{BackoffMin: time.Minute, BackoffMax: time.Second},
		{Batch: -1},
		{Concurrency: -1},
		{MaxAttempts: -1},
		{Lease: 10 * time.Second, PublishTimeout: time.Second, ShutdownGrace: 10*time.Second + 1},
		{ShutdownGrace: -1},
	} {
		_, err := outbox.NewDispatcher(o, newRecorder(), &cfg)
		require.Error(t, err, "%+v", cfg)
	}
	// The bounds themselves are allowed.
	for _, cfg := range []outbox.DispatcherConfig{
		{Lease: 10 * time.Second, PublishTimeout: 9*time.Second - 1},
		{Lease: 10 * time.Second, PublishTimeout: time.Second, ShutdownGrace: 10 * time.Second},
		{BackoffMin: time.Second, BackoffMax: time.Second},
	} {
		_, err := outbox.NewDispatcher(o, newRecorder(), &cfg)
		require.NoError(t, err, "%+v", cfg)
	}
	_, err := outbox.NewDispatcher(o, nil, nil)
	require.Error(t, err)
}

func TestHTTPPublisher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	var mu sync.Mutex
	got := map[string][]string{} // idempotency key → bodies received
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		calls[key]++
		n := calls[key]
		got[key] = append(got[key], string(body)+"|"+r.Header.Get(outbox.HeaderTopic)+"|"+r.Header.Get("X-Order"))
		mu.Unlock()
		switch {
		case key == "bad":
			http.Error(w, `{"error":{"type":"invalid_request_error","message":"no"}}`, http.StatusBadRequest)
		case key == "flaky" && n == 1:
			http.Error(w, "down", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()

	put(t, ctx, o,
		outbox.Message{ID: "ok", Topic: "order.placed", Payload: []byte("p1"), Headers: map[string]string{"X-Order": "o1"}},
		outbox.Message{ID: "flaky", Topic: "order.placed", Payload: []byte("p2")},
		outbox.Message{ID: "bad", Topic: "order.placed", Payload: []byte("p3")})
	d := newDispatcher(t, o, &outbox.HTTPPublisher{URL: srv.URL}, outbox.DispatcherConfig{})
	drain(t, ctx, d, o)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"p1|order.placed|o1"}, got["ok"], "the message ID is the idempotency key; payload and headers are sent")
	require.Equal(t, 2, calls["flaky"], "a 503 is retried with the same key")
	require.Equal(t, "delivered", rowOf(t, name, "flaky").State)
	require.Equal(t, 1, calls["bad"], "a 400 is not retried")
	require.Equal(t, "dead", rowOf(t, name, "bad").State)
}

// Postgres drops the dispatcher's connections (a restart, a failover, a terminated backend): Run
// logs and goes on, listens again, and delivers what is put afterwards, woken by its
// notification (polling is all but off).
func TestRunSurvivesLostConnections(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	_, name := setup(t, nil)
	app := "tempotent-dispatcher-" + name
	pool := ownPool(t, 4, app)
	o, err := outbox.New(pool, &outbox.Config{Schema: name})
	require.NoError(t, err)
	r := newRecorder()
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{Poll: time.Hour, Maintenance: time.Hour})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	listening := func() bool {
		var n int
		err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'", app).Scan(&n)
		return err == nil && n == 1
	}
	require.Eventually(t, listening, 10*time.Second, 20*time.Millisecond, "the dispatcher did not LISTEN")
	var killed int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed))
	require.Positive(t, killed)
	// Put while no connection listens (the listener waits a second before it connects again):
	// its notification reaches no one, and the poll is an hour away. The listener's first round
	// after it LISTENs again must find it.
	require.Eventually(t, func() bool { return !listening() }, 5*time.Second, 5*time.Millisecond, "the listening backend did not end")
	put(t, ctx, o, outbox.Message{ID: "while-away", Topic: "t"})
	require.Eventually(t, listening, 20*time.Second, 20*time.Millisecond, "the dispatcher did not LISTEN again")
	delivered := func(id string) func() bool {
		return func() bool {
			published, _, _ := r.snapshot()
			return published[id] == 1
		}
	}
	require.Eventually(t, delivered("while-away"), 20*time.Second, 10*time.Millisecond,
		"a message put while nothing listened waited for the next poll")

	put(t, ctx, o, outbox.Message{ID: "after", Topic: "t"})
	require.Eventually(t, delivered("after"), 20*time.Second, 10*time.Millisecond, "nothing was delivered after the connections were lost")
}

// A round that fails (here: the pool hands out a connection whose backend was terminated, as
// after a failover) is tried again after a short pause, not at the next poll: the wake-up that
// announced the message was spent on the failed round, and the poll is an hour away.
func TestAFailedRoundIsRetriedBeforeThePoll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	_, name := setup(t, nil)
	app := "tempotent-retry-" + name
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	// No ping on acquire: the dead connection is handed out, and the round fails on it.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	o, err := outbox.New(pool, &outbox.Config{Schema: name})
	require.NoError(t, err)
	r := newRecorder()
	d := newDispatcher(t, o, r, outbox.DispatcherConfig{Poll: time.Hour, Maintenance: -1})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	count := func(query string) int {
		var n int
		require.NoError(t, pgtest.Pool(t).QueryRow(ctx, query, app).Scan(&n))
		return n
	}
	listening := "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'"
	pooled := "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query NOT LIKE 'LISTEN%'"
	require.Eventually(t, func() bool {
		return count(listening) == 1 && pool.Stat().IdleConns() == 1
	}, 10*time.Second, 10*time.Millisecond, "the dispatcher did not listen and finish its first round")
	require.Equal(t, 1, count("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND query NOT LIKE 'LISTEN%'"))
	require.Eventually(t, func() bool { return count(pooled) == 0 }, 5*time.Second, 5*time.Millisecond, "the pool's backend did not end")

	// Put through another pool: its NOTIFY reaches the listener, which is still connected.
	other, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: name})
	require.NoError(t, err)
	put(t, ctx, other, outbox.Message{ID: "after-failover", Topic: "t"})
	require.Eventually(t, func() bool {
		published, _, _ := r.snapshot()
		return published["after-failover"] == 1
	}, 10*time.Second, 10*time.Millisecond, "the round after the failed one waited for the next poll")
}
