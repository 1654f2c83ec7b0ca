package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// lostClaims counts outbox.MetricLostClaim, the marks the database refused because their claim
// had ended: it shows that a mark reached the database, where a test of what the mark did not
// change could otherwise pass because it was never sent.
type lostClaims struct {
	client.MetricsHandler
	n atomic.Int64
}

func newLostClaims() *lostClaims { return &lostClaims{MetricsHandler: client.MetricsNopHandler} }

func (l *lostClaims) Counter(name string) client.MetricsCounter {
	if name == outbox.MetricLostClaim {
		return lostClaimCounter{l}
	}
	return l.MetricsHandler.Counter(name)
}

type lostClaimCounter struct{ l *lostClaims }

func (c lostClaimCounter) Inc(n int64) { c.l.n.Add(n) }

// tracedPool returns a pool of one connection, closed when t ends, whose round trips counter counts
// and whose backend application_name names in pg_stat_activity.
func tracedPool(t *testing.T, counter *pgtest.Counter, applicationName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = counter
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// rowText is message id's whole row as text: state, attempts, claimed_by, lease_until,
// available_at, delivered_at, last_error and the rest.
func rowText(t *testing.T, name, id string) string {
	t.Helper()
	var s string
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT o::text FROM "+name+".outbox o WHERE id = $1", id).Scan(&s))
	return s
}

// A dispatcher draining (A) publishes a message and then stalls past its claim's lease (a frozen
// process); another dispatcher (B) claims the message, at the next attempt or, after the message
// was parked as dead and requeued, at the same attempt again, and is publishing it when A
// resumes. A's Drain then sends its stale mark (delivered, failed or dead, as its receiver
// answered) with its next claim, in one round trip: the mark reaches the database (it is counted
// as a lost claim) and changes nothing of the row B holds. B then delivers it under its own
// claim. Removing the claimed_by/attempts fence of a mark's statement makes its case fail; the
// cases after a requeue fail with claimed_by alone removed.
func TestDrainsStaleMarkCannotTakeTheClaimThatFollowed(t *testing.T) {
	t.Parallel()
	for _, mark := range []struct {
		name   string
		answer error
	}{
		{"Delivered", nil},
		{"Failed", errors.New("the receiver failed A's attempt")},
		{"Dead", outbox.Permanent(errors.New("the receiver refused A's attempt for good"))},
	} {
		for _, requeued := range []bool{false, true} {
			name := mark.name + "/AtTheNextAttempt"
			if requeued {
				name = mark.name + "/AtTheSameAttemptAfterARequeue"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				staleDrainMark(t, mark.answer, requeued)
			})
		}
	}
}

// staleDrainMark runs one case of TestDrainsStaleMarkCannotTakeTheClaimThatFollowed: A's receiver
// answers answer (nil: delivered); requeued: B claims after a requeue, at A's attempt again.
func staleDrainMark(t *testing.T, answer error, requeued bool) {
	ctx := context.Background()
	o, name := setup(t, &outbox.Config{NoNotify: true})
	put(t, ctx, o, outbox.Message{ID: "m", Topic: "t"})

	// A: its own pool, so that its round trips are counted apart; one message a batch, so that
	// Drain claims again, with the marks, after the first batch.
	counter := &pgtest.Counter{}
	oA, err := outbox.New(tracedPool(t, counter, "drainfence-a-"+name), &outbox.Config{Schema: name, NoNotify: true})
	require.NoError(t, err)
	aPublished, aAnswer := make(chan outbox.Delivery, 1), make(chan error, 1)
	lost := newLostClaims()
	a, err := outbox.NewDispatcher(oA, outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		aPublished <- d
		select {
		case err := <-aAnswer:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}), &outbox.DispatcherConfig{Name: "A", Batch: 1, Maintenance: -1, BackoffMin: time.Hour, BackoffMax: time.Hour,
		Logger: quiet, Metrics: lost})
	require.NoError(t, err)

	bStarted, bRelease := make(chan outbox.Delivery, 1), make(chan struct{})
	b := newDispatcher(t, o, outbox.PublisherFunc(func(_ context.Context, d outbox.Delivery) error {
		bStarted <- d
		<-bRelease
		return nil
	}), outbox.DispatcherConfig{Name: "B", Maintenance: -1})
	var bReleased bool
	release := func() {
		if !bReleased {
			bReleased = true
			close(bRelease)
		}
	}
	t.Cleanup(release)

	aDone := make(chan error, 1)
	go func() { _, err := a.Drain(ctx); aDone <- err }()
	dA := <-aPublished
	require.Equal(t, 1, dA.Attempt)
	// A stalls here, publishing: its claim's lease ends (by the database's clock).
	_, err = pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".outbox SET lease_until = now() - interval '1 second'")
	require.NoError(t, err)
	if requeued {
		// Another dispatcher parks the message as dead and an operator requeues it: its
		// attempts start again from 0, so B's claim counts attempt 1, as A's did.
		refuses := newDispatcher(t, o, outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
			return outbox.Permanent(errors.New("the receiver refused it for good"))
		}), outbox.DispatcherConfig{Name: "C", Maintenance: -1})
		n, err := refuses.DispatchOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, "dead", rowOf(t, name, "m").State)
		require.NoError(t, o.RequeueMessage(ctx, "m", outbox.Action{By: "ops", Reason: "the receiver was fixed"}))
	}
	bDone := make(chan error, 1)
	go func() { _, err := b.DispatchOnce(ctx); bDone <- err }()
	dB := <-bStarted
	if requeued {
		require.Equal(t, dA.Attempt, dB.Attempt, "B's claim is at A's attempt again")
	} else {
		require.Equal(t, dA.Attempt+1, dB.Attempt)
	}
	held := rowText(t, name, "m")

	// A resumes with its receiver's answer; Drain sends the mark with its next claim, which
	// finds nothing to claim (B holds the message).
	counter.Reset()
	aAnswer <- answer
	require.NoError(t, <-aDone)
	require.Equal(t, int64(1), counter.RoundTrips(), "A's mark was not sent with its next claim, in one round trip")
	require.Equal(t, int64(1), lost.n.Load(), "A's stale mark did not reach the database, or was not refused")
	require.Equal(t, held, rowText(t, name, "m"), "A's stale mark changed the row that B's claim holds")

	release()
	require.NoError(t, <-bDone)
	var state, claimedBy string
	var attempts int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT state, claimed_by, attempts FROM "+name+".outbox WHERE id = 'm'").
		Scan(&state, &claimedBy, &attempts))
	require.True(t, state == "delivered" && strings.HasPrefix(claimedBy, "B#") && attempts == dB.Attempt,
		"B's claim did not deliver the message: %s, claimed by %q at %d", state, claimedBy, attempts)
}

// liveness bounds how long a test waits for a call that must give up on its own. It is not a
// performance threshold: when it passes, the call waited for what it should have given up on.
const liveness = 30 * time.Second

// lockedDrain is a Drain of dispatcher A (Batch 1) over m1 and m2 whose second round trip, the
// one carrying m1's delivered mark with the claim of m2, waits for the outbox table, held locked
// by lock.
type lockedDrain struct {
	name, app string
	lock      pgx.Tx
	published chan string
	done      chan error // Drain's error
}

// drainIntoALock starts that Drain, with cfg's lease and publish timeout, and returns once its
// round trip waits for the lock.
func drainIntoALock(t *testing.T, prefix string, cfg outbox.DispatcherConfig) *lockedDrain {
	t.Helper()
	ctx := context.Background()
	o, name := setup(t, &outbox.Config{NoNotify: true})
	put(t, ctx, o, outbox.Message{ID: "m1", Topic: "t"}, outbox.Message{ID: "m2", Topic: "t"})
	l := &lockedDrain{name: name, app: prefix + name, published: make(chan string, 2), done: make(chan error, 1)}
	oA, err := outbox.New(tracedPool(t, &pgtest.Counter{}, l.app), &outbox.Config{Schema: name, NoNotify: true})
	require.NoError(t, err)
	answer := make(chan struct{})
	cfg.Name, cfg.Batch, cfg.Maintenance = "A", 1, -1
	d := newDispatcher(t, oA, outbox.PublisherFunc(func(_ context.Context, d outbox.Delivery) error {
		l.published <- d.ID
		<-answer
		return nil
	}), cfg)
	go func() { _, err := d.Drain(ctx); l.done <- err }()
	require.Equal(t, "m1", <-l.published)
	l.lock, err = pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.lock.Rollback(context.Background()) })
	_, err = l.lock.Exec(ctx, "LOCK TABLE "+name+".outbox IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	close(answer) // m1 delivered: its mark goes with the claim of the next batch, into the lock
	// The round trip reaches the database and waits for the lock: what ends it, when it comes,
	// cuts short a round trip in flight, not one never sent.
	require.Eventually(t, func() bool { return l.backends(t, true) == 1 }, liveness, 5*time.Millisecond,
		"Drain's round trip never waited for the table's lock")
	return l
}

// backends counts A's backends, or those of them waiting for the table's lock.
func (l *lockedDrain) backends(t *testing.T, waiting bool) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity a WHERE a.application_name = $1
		AND (NOT $3 OR EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted AND l.relation = $2::regclass))`,
		l.app, l.name+".outbox", waiting).Scan(&n))
	return n
}

// Drain's round trip that carries a batch's marks with the next claim gives up when that batch's
// lease ends, rather than wait for a table held locked (DDL, a LOCK TABLE): past the lease the
// marks would meet whatever claim followed. It returns an error that says so, the statement
// waiting in the database is cancelled there (pgx sends a cancel request as it closes the
// connection) while the lock is still held, and nothing is marked or claimed, even once the lock
// is released. Without the deadline, Drain waits for the lock.
func TestDrainsRoundTripEndsWithTheMarkedBatchsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := drainIntoALock(t, "drainlease-", outbox.DispatcherConfig{Lease: 2 * time.Second, PublishTimeout: 200 * time.Millisecond})
	name, lock, done, published := l.name, l.lock, l.done, l.published
	var err error
	select {
	case err = <-done:
	case <-time.After(liveness):
		require.NoError(t, lock.Rollback(ctx))
		<-done
		t.Fatalf("Drain waited for the locked table past the marked batch's lease end")
	}
	require.ErrorIs(t, err, context.DeadlineExceeded, "Drain did not give up at the marked batch's lease end")
	require.ErrorContains(t, err, "mark 1 results and claim the next batch")

	// Cancelled in the database too, the lock still held: its transaction cannot commit later.
	require.Eventually(t, func() bool { return l.backends(t, false) == 0 }, liveness, 5*time.Millisecond,
		"the round trip Drain gave up on still runs in the database")
	require.NoError(t, lock.Rollback(ctx))
	var claimedBy string
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT claimed_by FROM "+name+".outbox WHERE id = 'm1'").Scan(&claimedBy))
	require.True(t, strings.HasPrefix(claimedBy, "A#"), "m1 is claimed by %q", claimedBy)
	require.Equal(t, row{State: "pending", Attempts: 1}, rowOf(t, name, "m1"), "m1 was marked after its lease")
	require.Equal(t, row{State: "pending"}, rowOf(t, name, "m2"), "m2 was claimed by the round trip Drain gave up on")
	require.Empty(t, published)
}

// The round trip that carries a batch's marks fails (here its backend is terminated while it
// waits for the table's lock, as in a failover): Drain marks that batch on its own, on another
// connection, while its lease lasts, rather than leaving a delivered message to be delivered
// again after the lease.
func TestDrainMarksItsBatchWhenTheRoundTripFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := drainIntoALock(t, "drainfail-", outbox.DispatcherConfig{Lease: time.Minute})
	name, app, lock, done := l.name, l.app, l.lock, l.done
	var err error
	var killed int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
		WHERE a.application_name = $1 AND EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)`, app).Scan(&killed))
	require.Equal(t, 1, killed)
	require.NoError(t, lock.Rollback(ctx))

	select {
	case err = <-done:
	case <-time.After(liveness):
		t.Fatal("Drain did not return after its round trip failed")
	}
	require.Error(t, err, "the failed round trip was not reported")
	require.Equal(t, "delivered", rowOf(t, name, "m1").State, "m1 was published but left unmarked, to be delivered again")
	require.Equal(t, row{State: "pending"}, rowOf(t, name, "m2"), "m2 was claimed by the round trip that failed")
}
