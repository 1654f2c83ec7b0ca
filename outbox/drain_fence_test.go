package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
