package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// leaseLeft returns, by the database's clock, how long the claim on message id has left, and
// whether the row is held by claimer at attempt.
func leaseLeft(ctx context.Context, t *testing.T, name, id, claimer string, attempt int) (time.Duration, bool) {
	var leftUS int64
	var held bool
	err := pgtest.Pool(t).QueryRow(ctx, `SELECT coalesce((extract(epoch FROM lease_until - clock_timestamp()) * 1e6)::bigint, 0),
			coalesce(starts_with(claimed_by, $2 || '#') AND attempts = $3 AND state = 'pending', false)
		FROM `+name+`.outbox WHERE id = $1`, id, claimer, attempt).Scan(&leftUS, &held)
	if err != nil {
		return 0, false
	}
	return time.Duration(leftUS) * time.Microsecond, held
}

// A batch larger than one round of Concurrency behind a slow receiver: the tail of the batch
// would be published after the claim's lease could have ended. Every publish must start while
// the claim still covers a whole PublishTimeout (by the database's clock), and the tail that
// cannot start in time is handed back without counting an attempt.
func TestPublishNeverStartsAfterTheLeaseCouldEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	var msgs []outbox.Message
	for i := range 8 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("m", i), Topic: "t"})
	}
	put(t, ctx, o, msgs...)

	const lease, publishTimeout, slow = time.Second, 300 * time.Millisecond, 200 * time.Millisecond
	var mu sync.Mutex
	var late []string
	var started atomic.Int32
	slowReceiver := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		started.Add(1)
		if left, held := leaseLeft(ctx, t, name, d.ID, "slow", d.Attempt); !held || left < publishTimeout {
			mu.Lock()
			late = append(late, fmt.Sprintf("%s started with %s of its lease left (held %v)", d.ID, left, held))
			mu.Unlock()
		}
		time.Sleep(slow)
		return nil
	})
	d := newDispatcher(t, o, slowReceiver, outbox.DispatcherConfig{Name: "slow", Batch: 8, Concurrency: 1, Lease: lease, PublishTimeout: publishTimeout})
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.Empty(t, late, "a publish started when its claim could not cover it")
	tried := int(started.Load())
	require.Less(t, tried, 8, "the whole batch was published although it could not fit in the lease")

	// The untried tail was handed back: no attempt counted, claimable at once.
	untried := 0
	for _, m := range msgs {
		switch r := rowOf(t, name, m.ID); r.State {
		case "delivered":
			require.Equal(t, 1, r.Attempts, m.ID)
		default:
			require.Equal(t, row{State: "pending"}, r, "%s was not published and must be handed back as it was", m.ID)
			untried++
		}
	}
	require.Equal(t, 8-tried, untried)
	n, err = d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, untried, n, "the handed-back tail was not claimable at once")
}

// FAULTS.md row 27: a dispatcher's lease ends mid-batch behind a slow receiver and a second
// dispatcher takes over. No message is published by both at once, each ordering key's messages
// are published in order, one at a time, and nothing is published twice.
func TestRow27LeaseEndsMidBatchBehindASlowReceiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, _ := setup(t, nil)
	const keys = 10
	var msgs []outbox.Message
	for i := range 2 {
		for k := range keys {
			msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("k%d-%d", k, i), Topic: "t", OrderingKey: fmt.Sprint("k", k)})
		}
	}
	put(t, ctx, o, msgs...)
	r := newRecorder()
	r.hold = 250 * time.Millisecond // the slow receiver
	firstStarted := make(chan struct{})
	var once sync.Once
	r.fail = func(outbox.Delivery) error { once.Do(func() { close(firstStarted) }); return nil }
	cfg := outbox.DispatcherConfig{Batch: keys, Concurrency: 2, Lease: time.Second}
	first := newDispatcher(t, o, r, cfg)
	second := newDispatcher(t, o, r, cfg)

	var wg sync.WaitGroup
	wg.Go(func() { drain(t, ctx, first, o) })
	<-firstStarted
	wg.Go(func() { drain(t, ctx, second, o) })
	wg.Wait()

	published, byKey, overlaps := r.snapshot()
	require.Empty(t, overlaps, "a message or an ordering key was published by two dispatchers at once")
	for k := range keys {
		key := fmt.Sprint("k", k)
		require.Equal(t, []string{key + "-0", key + "-1"}, byKey[key], "key %s out of order", key)
	}
	for id, times := range published {
		require.Equal(t, 1, times, "%s published again: a claim was lost", id)
	}
	require.Len(t, published, 2*keys)
}

// Two messages of one ordering key are never in one batch: the claim takes a key's first
// undelivered message only, so that a batch never publishes a key's messages concurrently or
// out of order.
func TestOneBatchHoldsOneMessagePerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o,
		outbox.Message{ID: "a0", Topic: "t", OrderingKey: "a"},
		outbox.Message{ID: "a1", Topic: "t", OrderingKey: "a"},
		outbox.Message{ID: "free", Topic: "t"},
		outbox.Message{ID: "a2", Topic: "t", OrderingKey: "a"})
	d := newDispatcher(t, o, newRecorder(), outbox.DispatcherConfig{})
	n, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "one claim took more than the first message of key a")
	require.Equal(t, "pending", rowOf(t, name, "a1").State)
	require.Zero(t, rowOf(t, name, "a1").Attempts)
}

// A dispatcher that published and was then paused past its lease (a frozen process) must not
// mark the message delivered once another dispatcher holds it: the second claim's publish failed,
// and the message must be retried, not recorded as delivered by the claim that lost it.
func TestLateDeliveredMarkCannotTakeAnotherClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "m", Topic: "t"})
	second := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		return errors.New("the receiver refused the second attempt")
	}), outbox.DispatcherConfig{Name: "second", BackoffMin: time.Hour, BackoffMax: time.Hour})
	paused := outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		// Published; before the mark the process stalls, the lease ends, and another
		// dispatcher claims the message and fails to publish it.
		_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".outbox SET lease_until = now() - interval '1 second'")
		require.NoError(t, err)
		n, err := second.DispatchOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		return nil
	})
	first := newDispatcher(t, o, paused, outbox.DispatcherConfig{Name: "first"})
	_, err := first.DispatchOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, row{State: "pending", Attempts: 2, Error: "the receiver refused the second attempt"}, rowOf(t, name, "m"),
		"the first dispatcher's late mark overwrote the second claim")
}

// A dispatcher frozen between publishing and marking must not mark a claim it no longer holds,
// even one made later under the same Name at the same attempt: Requeue sets a dead message's
// attempts back to 0, so after it the name and the attempt no longer tell two claims apart. The
// late mark of a failed publish would release the live claim's lease while it publishes, and a
// third dispatcher could then publish the message at the same time.
func TestLateMarkCannotTakeAClaimAfterARequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "m", Topic: "t"})
	// The same Name on every dispatcher, as when one name is configured on several workers.
	cfg := outbox.DispatcherConfig{Name: "same", BackoffMin: time.Hour, BackoffMax: time.Hour}
	refuses := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		return outbox.Permanent(errors.New("the receiver refused it for good"))
	}), cfg)
	started, release := make(chan struct{}), make(chan struct{})
	live := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		close(started)
		<-release
		return nil
	}), cfg)
	liveDone := make(chan error, 1)
	frozen := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		// Frozen after publishing attempt 1: the lease ends, another claim parks the message
		// as dead, an operator requeues it, and a new claim at attempt 1 is publishing when
		// this one wakes with its answer.
		_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".outbox SET lease_until = now() - interval '1 second'")
		require.NoError(t, err)
		_, err = refuses.DispatchOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, "dead", rowOf(t, name, "m").State)
		require.NoError(t, o.Requeue(ctx, "m"))
		go func() { _, err := live.DispatchOnce(ctx); liveDone <- err }()
		<-started
		return errors.New("the frozen dispatcher's late failure")
	}), cfg)
	_, err := frozen.DispatchOnce(ctx)
	require.NoError(t, err)

	var leased bool
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT lease_until > now() FROM "+name+".outbox WHERE id = 'm'").Scan(&leased))
	r := rowOf(t, name, "m")
	require.True(t, leased && r.Error != "the frozen dispatcher's late failure",
		"the frozen dispatcher's late mark released the live claim: %+v, lease live %t", r, leased)
	close(release)
	require.NoError(t, <-liveDone)
	require.Equal(t, "delivered", rowOf(t, name, "m").State)
}

// FAULTS.md row 28: a worker shut down gracefully mid-batch. The publishes in flight finish and
// are marked; the messages not yet tried are handed back as they were (no attempt counted, so
// that none is parked as dead on its last attempt), and another dispatcher delivers them at once.
func TestRow28GracefulShutdownMidBatch(t *testing.T) {
	t.Parallel()
	o, name := setup(t, nil)
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("m%d", i), Topic: "t"})
	}
	put(t, context.Background(), o, msgs...)

	entered := make(chan string, 10)
	release := make(chan struct{})
	inFlight := outbox.PublisherFunc(func(_ context.Context, d outbox.Delivery) error {
		entered <- d.ID
		<-release // the receiver answers after the shutdown began
		return nil
	})
	// MaxAttempts 1: every claim is a message's last attempt.
	ctx, cancel := context.WithCancel(context.Background())
	d := newDispatcher(t, o, inFlight, outbox.DispatcherConfig{Batch: 10, Concurrency: 2, MaxAttempts: 1, Poll: time.Hour, Maintenance: -1})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	first, second := <-entered, <-entered
	cancel()
	close(release)
	require.NoError(t, <-done)
	require.Len(t, entered, 0, "a publish started after the shutdown began")

	for _, m := range msgs {
		r := rowOf(t, name, m.ID)
		if m.ID == first || m.ID == second {
			require.Equal(t, row{State: "delivered", Attempts: 1}, r, "%s was in flight at shutdown and finished", m.ID)
			continue
		}
		require.Equal(t, row{State: "pending"}, r, "%s was never tried and must be handed back as it was", m.ID)
	}
	next := newDispatcher(t, o, newRecorder(), outbox.DispatcherConfig{MaxAttempts: 1})
	n, err := next.DispatchOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 8, n, "the handed-back messages were not claimable at once")
	st, err := o.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, outbox.Stats{}, st)
}

// A publish still running when the shutdown grace ends is cancelled and released for another
// dispatcher at once, without counting the attempt: the receiver did nothing wrong.
func TestShutdownReleasesAnInterruptedPublishAtOnce(t *testing.T) {
	t.Parallel()
	o, name := setup(t, nil)
	put(t, context.Background(), o, outbox.Message{ID: "m", Topic: "t"})
	entered := make(chan struct{})
	hung := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	d := newDispatcher(t, o, hung, outbox.DispatcherConfig{MaxAttempts: 1, ShutdownGrace: 50 * time.Millisecond,
		BackoffMin: time.Hour, BackoffMax: time.Hour})
	done := make(chan error, 1)
	go func() { _, err := d.DispatchOnce(ctx); done <- err }()
	<-entered
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, row{State: "pending"}, rowOf(t, name, "m"), "an interrupted publish counted as a failed attempt")

	next := newDispatcher(t, o, newRecorder(), outbox.DispatcherConfig{MaxAttempts: 1})
	n, err := next.DispatchOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n, "the interrupted message was not released at once")
	require.Equal(t, row{State: "delivered", Attempts: 1}, rowOf(t, name, "m"))
}
