package outbox

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/telemetry"
)

// Defaults applied by NewDispatcher.
const (
	BatchDefault       = 100
	ConcurrencyDefault = 8
	LeaseDefault       = 30 * time.Second
	PollDefault        = time.Second
	BackoffMinDefault  = time.Second
	BackoffMaxDefault  = 5 * time.Minute
	MaxAttemptsDefault = 25
	MaintenanceDefault = time.Minute
	PruneBatchDefault  = 1000
	// ListenBackoffDefault is the mean pause before listening again after the connection was
	// lost (drawn between half and one and a half of it, so that listeners do not reconnect
	// together).
	ListenBackoffDefault = time.Second
	// ShutdownGraceDefault is how long the publishes in flight may go on after the dispatcher is
	// stopped, unless PublishTimeout is shorter.
	ShutdownGraceDefault  = 10 * time.Second
	publishTimeoutDivisor = 2 // the default publish timeout is the lease divided by this
	// markShare: a tenth of the lease is kept for marking the results, after the last publish
	// that may start has timed out.
	markShare = 10
	// pruneRoundBatches bounds one round of pruning, so that a backlog of expired messages
	// delays no delivery by more than that: the dispatcher goes on pruning between its batches
	// (Dispatcher.Drain) and in its idle time (Dispatcher.Run) until a batch comes back short.
	pruneRoundBatches = 10
)

// Metric names, emitted through DispatcherConfig.Metrics. They are the telemetry package's, which
// names every metric of the toolkit and says what each counts.
const (
	MetricDelivered  = telemetry.OutboxDelivered  // counter: messages marked delivered
	MetricRetried    = telemetry.OutboxRetried    // counter: failed attempts that will be retried
	MetricDead       = telemetry.OutboxDead       // counter: messages parked as dead
	MetricLostClaim  = telemetry.OutboxLostClaim  // counter: marks refused because the claim had ended
	MetricHandedBack = telemetry.OutboxHandedBack // counter: claimed messages handed back unpublished, no attempt counted
	MetricPruned     = telemetry.OutboxPruned     // counter: delivered messages pruned past retention
	MetricBacklog    = telemetry.OutboxBacklog    // gauge: pending messages
	MetricOldestAge  = telemetry.OutboxOldestAge  // gauge: age of the oldest pending message
	MetricDeadRows   = telemetry.OutboxDeadRows   // gauge: dead messages waiting for an operator
)

// DispatcherConfig configures a Dispatcher. The zero value is valid.
type DispatcherConfig struct {
	// Name identifies this dispatcher in the claims it makes: the outbox's claimed_by column
	// holds it, then "#" and a random identity of the claim, which the marks are fenced on (two
	// dispatchers may share a name). Default: host name, process ID and a random suffix.
	Name string
	// Topics restricts the dispatcher to these topics, so that different publishers can serve
	// different topics. Empty: every topic.
	Topics []string
	// Batch is how many messages one claim takes. Default BatchDefault.
	Batch int
	// Concurrency is how many messages of a batch are published at once. Default
	// ConcurrencyDefault.
	Concurrency int
	// Lease is how long a claim keeps other dispatchers off a message. Default LeaseDefault.
	// The dispatcher measures it from just before it sends the claim, and starts a publish only
	// while the claim can cover all of it: a publish starts at the latest Lease - PublishTimeout
	// - Lease/10 after the claim was sent; the rest of the batch is handed back (see Dispatcher).
	Lease time.Duration
	// PublishTimeout bounds one Publish call; it must leave a tenth of the lease to mark the
	// result, and the shorter it is, the more of a batch a claim can publish behind a slow
	// receiver. Default Lease/2.
	PublishTimeout time.Duration
	// Poll is how often the dispatcher looks for messages when no notification wakes it (and
	// for messages whose backoff has ended). Default PollDefault.
	Poll time.Duration
	// BackoffMin and BackoffMax bound the delay before a failed message is claimed again: it
	// is drawn between BackoffMin and a ceiling that doubles with each attempt from twice
	// BackoffMin, capped at BackoffMax.
	BackoffMin, BackoffMax time.Duration
	// MaxAttempts is how many claims a message gets before it is parked as dead. A claim counts
	// when it is made, so a message that crashes its dispatcher every time still gets there.
	// Default MaxAttemptsDefault.
	MaxAttempts int
	// Maintenance is how often Run prunes delivered messages past the outbox's retention and
	// refreshes the backlog gauges. Default MaintenanceDefault; negative turns both off. One
	// round prunes at most ten batches of PruneBatchDefault; while the last of them came back
	// full, the dispatcher prunes one more batch after each full batch it delivers (Drain), and
	// goes on round after round while it has nothing to deliver (Run), until a batch comes back
	// short: a backlog of expired messages is worked off while delivering, not a round a period.
	Maintenance time.Duration
	// Metrics receives the dispatcher's counters and gauges (the Metric constants): give the
	// Temporal client's handler to have them beside the worker's. Default: none.
	Metrics client.MetricsHandler
	// Logger logs failed attempts and dead messages. Default slog.Default().
	Logger *slog.Logger
	// ShutdownGrace is how long the publishes in flight may go on once the dispatcher's context
	// ends (Run's, or DispatchOnce's): they are then cancelled, and their messages handed back
	// without counting the attempt, as are those of the batch never tried. It cannot exceed
	// Lease; a publish never outlasts PublishTimeout anyway. Default ShutdownGraceDefault, or
	// PublishTimeout when that is shorter.
	ShutdownGrace time.Duration
}

// Dispatcher delivers an outbox's messages through a Publisher: at least once, never one message
// from two calls at once, retrying with backoff, parking poison messages as dead. Run any number
// of dispatchers on one outbox, in one process or many; they share the work through
// FOR UPDATE SKIP LOCKED and leases.
//
// "Never at once" rests on the lease, which the dispatcher measures on its own clock from just
// before it sends the claim (the database starts it later, at the claim's now(), so the
// dispatcher's reckoning ends first). A publish starts only if it can end, cancelled at
// PublishTimeout, with a tenth of the lease still left to mark its result; a batch whose tail
// cannot start in time (a slow receiver, a batch larger than Concurrency) hands that tail back
// unpublished, releasing its claim and taking back the attempt the claim counted, for the next
// claim of this dispatcher or another. The lease is never extended: a claim's reach is fixed
// when it is made, so nothing but that claim's own clock decides whether a publish may start.
// Marks are fenced on the claim (claimed_by and the attempt it counted): a dispatcher whose
// claim ended cannot record anything over the claim that followed. A process frozen (not dead)
// for longer than the lease can still be publishing when another claims the message, as with any
// lease; receivers deduplicate on the message ID for that reason too.
//
// An ordered message is claimed only once every message before it on its key is delivered, so
// one batch holds at most one message of a key, and a key's next message cannot be claimed, let
// alone published, before its predecessor is marked delivered.
//
// An attempt counts only for a publish that started: messages handed back untried, and
// publishes cancelled by a shutdown, are released with their attempt count as it was before the
// claim. An attempt counted at a claim whose dispatcher then died stays counted, so that a
// message that kills its dispatcher every time still ends dead.
type Dispatcher struct {
	o   *Outbox
	pub Publisher
	cfg DispatcherConfig
	log *slog.Logger
	met client.MetricsHandler
	// behind: the last pruning batch came back full, so delivered messages past retention are
	// waiting; Run and Drain prune them between batches until one comes back short.
	behind atomic.Bool
}

// NewDispatcher returns a dispatcher of o's messages through pub. A publisher with a Validate
// method (HTTPPublisher) is validated here, and refused with its error (a *ConfigError), rather
// than left to fail every message until each is dead.
func NewDispatcher(o *Outbox, pub Publisher, cfg *DispatcherConfig) (*Dispatcher, error) {
	if o == nil || pub == nil {
		return nil, errors.New("outbox.NewDispatcher: the outbox and the publisher are required")
	}
	// A publisher whose settings cannot work (HTTPPublisher.Validate) would fail every message
	// until each is dead; refuse it here, where the mistake is made.
	if v, ok := pub.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("outbox.NewDispatcher: %w", err)
		}
	}
	var c DispatcherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.Name = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, c.Lease/publishTimeoutDivisor)
	c.Poll = cmp.Or(c.Poll, PollDefault)
	c.BackoffMin = cmp.Or(c.BackoffMin, BackoffMinDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.Maintenance = cmp.Or(c.Maintenance, MaintenanceDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, min(ShutdownGraceDefault, c.PublishTimeout))
	switch {
	case c.Batch < 0 || c.Concurrency < 0 || c.MaxAttempts < 0:
		return nil, fmt.Errorf("outbox.NewDispatcher: Batch (%d), Concurrency (%d) and MaxAttempts (%d) must be positive, or 0 for the default",
			c.Batch, c.Concurrency, c.MaxAttempts)
	case c.Lease < 0 || c.PublishTimeout < 0 || c.Poll < 0 || c.BackoffMin < 0 || c.BackoffMax < 0:
		return nil, errors.New("outbox.NewDispatcher: durations must be positive, or 0 for the default")
	case c.PublishTimeout >= c.Lease-c.Lease/markShare:
		return nil, fmt.Errorf("outbox.NewDispatcher: PublishTimeout %s must be shorter than nine tenths of Lease %s: a tenth of the lease is kept for marking the result",
			c.PublishTimeout, c.Lease)
	case c.ShutdownGrace < 0 || c.ShutdownGrace > c.Lease:
		return nil, fmt.Errorf("outbox.NewDispatcher: ShutdownGrace %s must be positive and no longer than Lease %s, or 0 for the default",
			c.ShutdownGrace, c.Lease)
	case c.BackoffMin > c.BackoffMax:
		return nil, fmt.Errorf("outbox.NewDispatcher: BackoffMin %s is above BackoffMax %s", c.BackoffMin, c.BackoffMax)
	}
	return &Dispatcher{
		o: o, pub: pub, cfg: c,
		log: cmp.Or(c.Logger, slog.Default()).With("component", "tempotent.outbox", "dispatcher", c.Name),
		met: cmp.Or[client.MetricsHandler](c.Metrics, client.MetricsNopHandler),
	}, nil
}

// Run dispatches until ctx ends, waking on the outbox's notifications and every Poll, and
// maintains the table every Maintenance. It returns nil when ctx ends; database errors are
// logged and retried, so a Postgres restart pauses it without stopping it.
//
// When ctx ends, Run claims nothing more, lets the publishes in flight finish within
// ShutdownGrace, marks their results, and hands the rest of its batch back without counting an
// attempt (see DispatcherConfig.ShutdownGrace), before it returns.
//
// Run delivers with Drain: each batch's marks go out with the claim of the next batch.
//
// The dispatchers running on one pool in a process share one LISTEN connection, opened outside
// the pool with the pool's connection settings (its BeforeConnect and AfterConnect hooks are not
// run for it). Each dispatcher takes a connection of the pool only for a claim, a mark or a
// maintenance statement, one at a time; Run refuses to start (returns an error at once) a
// dispatcher that would make more dispatchers on the pool than it has connections.
func (d *Dispatcher) Run(ctx context.Context) error {
	wake, unsubscribe, err := subscribe(d.o.db, d.o.cfg.Schema, d.log)
	if err != nil {
		return fmt.Errorf("outbox: dispatcher %s: %w", d.cfg.Name, err)
	}
	defer unsubscribe()

	poll := time.NewTicker(d.cfg.Poll)
	defer poll.Stop()
	var maintain <-chan time.Time
	if d.cfg.Maintenance > 0 {
		t := time.NewTicker(d.cfg.Maintenance)
		defer t.Stop()
		maintain = t.C
		d.maintain(ctx)
	}
	// failures counts the rounds in a row that failed (a lost connection, a failover): the next
	// round comes after a short, growing, jittered pause rather than at the next poll, which
	// may be far off, so that what a wake-up announced during the outage is not left waiting.
	failures := 0
	for {
		var retry, catchUp <-chan time.Time
		if _, err := d.Drain(ctx); err != nil && ctx.Err() == nil {
			failures++
			pause := d.retryPause(failures)
			d.log.Warn("dispatch failed; retrying", "err", err, "in", pause)
			retry = time.After(pause)
		} else if err == nil {
			failures = 0
		}
		if d.behind.Load() && retry == nil {
			catchUp = ready
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		case <-retry:
		case <-catchUp:
			d.pruneRound(ctx)
		case <-maintain:
			d.maintain(ctx)
		}
	}
}

// ready is a channel always ready to receive from.
var ready = func() chan time.Time { c := make(chan time.Time); close(c); return c }()

// retryPauseMin is the mean pause after the first failed round; it doubles with each failure
// in a row, up to the poll interval.
const retryPauseMin = 100 * time.Millisecond

// retryPause is the pause before the round after the n-th failed one in a row: drawn between
// half and one and a half times a mean that doubles from retryPauseMin, capped at Poll.
func (d *Dispatcher) retryPause(n int) time.Duration {
	mean := d.cfg.Poll
	if n < 20 && retryPauseMin<<(n-1) < mean {
		mean = retryPauseMin << (n - 1)
	}
	return mean/2 + rand.N(mean)
}

// signal wakes the dispatch loop, unless a wake-up is already pending.
func signal(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// claimed is a message this dispatcher holds a claim on.
type claimed struct {
	seq      int64
	by       string // the claim's identity, in claimed_by: the dispatcher's name and a random suffix
	delivery Delivery
	tried    bool  // Publish was called
	err      error // Publish's result
	// interrupted: Publish was cancelled by a shutdown, after its grace; it says nothing about
	// the message.
	interrupted bool
}

// DispatchOnce claims one batch, publishes what of it the claim's lease can cover, marks the
// results and hands the rest back, and returns how many messages it claimed. Run calls it in a
// loop; call it yourself to dispatch from a job of your own.
//
// When ctx ends, DispatchOnce starts no more publishes; those in flight get ShutdownGrace to
// finish. Their results are marked, and the messages not tried, or whose publish the grace cut
// short, are handed back without counting an attempt; it then returns with a nil error.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, h, err := d.round(ctx, nil)
	if err != nil || h == nil {
		return 0, err
	}
	return n, d.markHeld(ctx, h)
}

// claim takes up to Batch ready messages: pending, out of backoff, not under a live claim, and,
// for ordered ones, with no undelivered message before them on their key. It counts the attempt
// now (mark takes it back from a message handed back unpublished), and parks as dead, without
// counting another, the messages that have had MaxAttempts claims already, instead of handing
// them out again.
//
// With prev, the marks of that batch go first, in the same round trip and the same transaction
// (see Dispatcher.Drain): they are fenced as mark's are, and the claim sees what they changed (a
// message marked delivered frees the next one of its key). If the round trip fails, neither the
// marks nor the claim took effect, or both did and the reply was lost.
func (d *Dispatcher) claim(ctx context.Context, prev *held) ([]*claimed, error) {
	var topics []string
	if len(d.cfg.Topics) > 0 {
		topics = d.cfg.Topics
	}
	by := d.claimIdentity()
	cb := claimBatch(d.o.table, topics, d.cfg.Batch, d.cfg.Lease, d.cfg.MaxAttempts, by)
	var batch []*claimed
	cb.QueuedQueries[len(cb.QueuedQueries)-1].Query(func(rows pgx.Rows) error {
		for rows.Next() {
			c := claimed{by: by}
			var state string
			m := &c.delivery
			if err := rows.Scan(&c.seq, &state, &m.ID, &m.Topic, &m.OrderingKey, &m.Payload, &m.Headers, &m.Attempt, &m.CreatedAt); err != nil {
				return err
			}
			if state == "dead" {
				d.met.Counter(MetricDead).Inc(1)
				d.log.Error("message parked as dead: it used up its attempts without an outcome", "id", m.ID, "topic", m.Topic, "attempts", m.Attempt)
				continue
			}
			batch = append(batch, &c)
		}
		return rows.Err()
	})
	b := cb
	if prev != nil {
		// byIndex first: it holds for the whole transaction, and the claim must stay behind it.
		b = &pgx.Batch{QueuedQueries: slices.Clone(cb.QueuedQueries[:1])}
		d.queueMarks(b, prev.batch)
		b.QueuedQueries = append(b.QueuedQueries, cb.QueuedQueries[1:]...)
	}
	if err := d.o.db.SendBatch(ctx, b).Close(); err != nil { // the claim's commit
		if prev != nil {
			return nil, fmt.Errorf("outbox: mark %d results and claim the next batch (the results will be delivered again after their lease): %w",
				len(prev.batch), schema.Explain(err, d.o.cfg.Schema))
		}
		return nil, fmt.Errorf("outbox: claim: %w", schema.Explain(err, d.o.cfg.Schema))
	}
	return batch, nil
}

// byIndex prices sequential scans out of the transaction of a statement that reads the
// undelivered messages: the claim, and Stats. Planned without statistics (a table never
// analyzed: a new one, or any after pg_upgrade, which carries none over), such a statement takes
// the partial index of undelivered messages to hold most of the table, and reads the whole table
// instead, delivered messages kept for the retention included: a claim read 4,000 buffers for 100
// messages among 300,000 delivered, against 108 through the index.
// TestUndeliveredAreFoundByTheIndex.
const byIndex = `SELECT set_config('enable_seqscan', 'off', true)`

// claimBatch is the claim of up to n messages of topics (nil for all) on table, as a dispatcher
// sends it: behind byIndex, in one round trip and one transaction.
func claimBatch(table string, topics []string, n int, lease time.Duration, maxAttempts int, name string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(byIndex)
	b.Queue(claimStatement(table), topics, n, lease.Microseconds(), maxAttempts, name)
	return b
}

// claimStatement is the claim on table: $1 the topics (NULL for all), $2 the batch size, $3 the
// lease in microseconds, $4 MaxAttempts, $5 the dispatcher's name. The UPDATE takes the rows the
// CTE chose by seq = ANY, one probe of the primary key each: as a join with the CTE, an analyzed
// table of a few thousand messages had it hash the whole primary key at every claim.
// TestClaimUpdatesByThePrimaryKey.
func claimStatement(table string) string {
	return `
		WITH ready AS (
			SELECT seq FROM ` + table + ` o
			WHERE state = 'pending'
			  AND available_at <= now()
			  AND (lease_until IS NULL OR lease_until <= now())
			  AND ($1::text[] IS NULL OR topic = ANY ($1))
			  AND (ordering_key IS NULL OR NOT EXISTS (
			        SELECT FROM ` + table + ` e
			        WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.state <> 'delivered'))
			ORDER BY seq
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		UPDATE ` + table + ` m SET
			attempts    = CASE WHEN m.attempts < $4 THEN m.attempts + 1 ELSE m.attempts END,
			lease_until = CASE WHEN m.attempts < $4 THEN now() + $3::bigint * interval '1 microsecond' END,
			claimed_by  = $5,
			state       = CASE WHEN m.attempts < $4 THEN 'pending' ELSE 'dead' END,
			last_error  = CASE WHEN m.attempts < $4 THEN m.last_error
			                   ELSE format('claimed %s times without a recorded outcome (the dispatcher died or lost its claim each time); last error: %s', m.attempts, coalesce(m.last_error, 'none')) END
		WHERE m.seq = ANY (ARRAY(SELECT seq FROM ready))
		RETURNING m.seq, m.state, m.id, m.topic, coalesce(m.ordering_key, ''), m.payload, m.headers, m.attempts, m.created_at`
}

// publish publishes batch with up to Concurrency calls at once, each bounded by PublishTimeout,
// and starts a call only while it can end, and its result be marked, before leaseEnd: the
// messages it does not reach stay untried. When ctx ends it starts no more; the calls in flight
// run under graceCtx, which ends ShutdownGrace later (graceAfter).
func (d *Dispatcher) publish(ctx, graceCtx context.Context, leaseEnd time.Time, batch []*claimed) {
	startBy := leaseEnd.Add(-d.cfg.PublishTimeout - d.cfg.Lease/markShare)
	sem := make(chan struct{}, d.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, c := range batch {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// Looked at after the wait for a slot, which may have outlasted either.
		if ctx.Err() != nil || time.Now().After(startBy) {
			return
		}
		c.tried = true
		wg.Go(func() {
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(graceCtx, d.cfg.PublishTimeout)
			defer cancel()
			c.err = d.publishOne(pctx, c.delivery)
			c.interrupted = c.err != nil && graceCtx.Err() != nil
		})
	}
}

// graceAfter returns a context that ends ShutdownGrace after ctx does, and a function that
// releases it, which must be called.
func (d *Dispatcher) graceAfter(ctx context.Context) (context.Context, func()) {
	graceCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	released := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			timer = time.AfterFunc(d.cfg.ShutdownGrace, cancel)
		}
	})
	return graceCtx, func() {
		stop()
		mu.Lock()
		released = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// publishOne publishes d, turning a panic in the publisher into a failed attempt: a message that
// makes the publisher panic must not take the worker's activities down with it; it is retried
// and then parked as dead like any other failure.
func (d *Dispatcher) publishOne(ctx context.Context, dl Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox: the publisher panicked: %v", p)
		}
	}()
	return d.pub.Publish(ctx, dl)
}

// mark records each result under this dispatcher's claim: delivered, retried after a backoff,
// or dead; and hands back, without the attempt the claim counted, the messages that were not
// tried or whose publish a shutdown cut short. Every statement is fenced on the claim
// (claimed_by and attempts): a row whose claim was lost (its lease ended and another dispatcher
// claimed it) is left alone.
func (d *Dispatcher) mark(ctx context.Context, batch []*claimed) error {
	b := &pgx.Batch{}
	d.queueMarks(b, batch)
	if err := d.o.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("outbox: mark %d results (the messages will be delivered again after their lease): %w", len(batch), err)
	}
	return nil
}

// queueMarks queues on b the statements of mark, each counting and logging its outcome when its
// result is read.
func (d *Dispatcher) queueMarks(b *pgx.Batch, batch []*claimed) {
	var delivered, handBack []*claimed
	for _, c := range batch {
		switch {
		case !c.tried || c.interrupted:
			handBack = append(handBack, c)
			continue
		case c.err == nil:
			delivered = append(delivered, c)
			continue
		}
		msg := c.err.Error()
		if IsPermanent(c.err) || c.delivery.Attempt >= d.cfg.MaxAttempts {
			b.Queue(`UPDATE `+d.o.table+` SET state = 'dead', lease_until = NULL, last_error = $4
				WHERE seq = $1 AND attempts = $2 AND claimed_by = $3 AND state = 'pending'`,
				c.seq, c.delivery.Attempt, c.by, msg).Exec(func(ct pgconn.CommandTag) error {
				d.counted(ct, MetricDead, c)
				if ct.RowsAffected() == 1 {
					d.log.Error("message parked as dead", "id", c.delivery.ID, "topic", c.delivery.Topic, "attempt", c.delivery.Attempt, "err", msg)
				}
				return nil
			})
			continue
		}
		backoff := d.backoff(c.delivery.Attempt)
		b.Queue(`UPDATE `+d.o.table+` SET lease_until = NULL, available_at = now() + $4::bigint * interval '1 microsecond', last_error = $5
			WHERE seq = $1 AND attempts = $2 AND claimed_by = $3 AND state = 'pending'`,
			c.seq, c.delivery.Attempt, c.by, backoff.Microseconds(), msg).Exec(func(ct pgconn.CommandTag) error {
			d.counted(ct, MetricRetried, c)
			d.log.Warn("publish failed; will retry", "id", c.delivery.ID, "topic", c.delivery.Topic, "attempt", c.delivery.Attempt, "in", backoff, "err", msg)
			return nil
		})
	}
	if len(delivered) > 0 {
		seqs, attempts, bys := claims(delivered)
		b.Queue(`UPDATE `+d.o.table+` m SET state = 'delivered', delivered_at = now(), lease_until = NULL
			FROM unnest($1::bigint[], $2::int[], $3::text[]) AS r(seq, attempts, claimed_by)
			WHERE m.seq = r.seq AND m.attempts = r.attempts AND m.claimed_by = r.claimed_by AND m.state = 'pending'`,
			seqs, attempts, bys).Exec(func(ct pgconn.CommandTag) error {
			d.met.Counter(MetricDelivered).Inc(ct.RowsAffected())
			if lost := int64(len(seqs)) - ct.RowsAffected(); lost > 0 {
				d.met.Counter(MetricLostClaim).Inc(lost)
				d.log.Warn("delivered messages whose claim had ended: they will be delivered again", "count", lost)
			}
			return nil
		})
	}
	if len(handBack) > 0 {
		// claimed_by is cleared so that no mark of an earlier claim by this dispatcher, at the
		// attempt count restored here, can match the row.
		seqs, attempts, bys := claims(handBack)
		b.Queue(`UPDATE `+d.o.table+` m SET attempts = m.attempts - 1, lease_until = NULL, claimed_by = NULL
			FROM unnest($1::bigint[], $2::int[], $3::text[]) AS r(seq, attempts, claimed_by)
			WHERE m.seq = r.seq AND m.attempts = r.attempts AND m.claimed_by = r.claimed_by AND m.state = 'pending'`,
			seqs, attempts, bys).Exec(func(ct pgconn.CommandTag) error {
			d.met.Counter(MetricHandedBack).Inc(ct.RowsAffected())
			d.log.Debug("handed back messages not published: their claim could not cover them, or the dispatcher is stopping", "count", ct.RowsAffected())
			return nil
		})
	}
}

// claims returns the sequence numbers, attempt counts and claim identities that fence cs' marks.
func claims(cs []*claimed) (seqs []int64, attempts []int32, bys []string) {
	for _, c := range cs {
		seqs = append(seqs, c.seq)
		attempts = append(attempts, int32(c.delivery.Attempt))
		bys = append(bys, c.by)
	}
	return seqs, attempts, bys
}

// claimIdentity names one claim: the dispatcher's name and 64 random bits. The marks are fenced
// on it and on the attempt the claim counted. The name alone is not enough: Requeue sets a dead
// message's attempts back to 0, so a dispatcher frozen since an earlier claim at attempt n, under
// a name that claimed the message again at attempt n after the requeue (the same Name configured
// on two workers, or the same Dispatcher called from two goroutines), would mark a claim it does
// not hold.
func (d *Dispatcher) claimIdentity() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return d.cfg.Name + "#" + hex.EncodeToString(b[:])
}

// counted counts one mark under name, or a lost claim when the mark matched no row.
func (d *Dispatcher) counted(ct pgconn.CommandTag, name string, c *claimed) {
	if ct.RowsAffected() == 1 {
		d.met.Counter(name).Inc(1)
		return
	}
	d.met.Counter(MetricLostClaim).Inc(1)
	d.log.Warn("result not recorded: the claim had ended", "id", c.delivery.ID, "attempt", c.delivery.Attempt)
}

// backoff is the delay after a failed attempt: drawn between BackoffMin and a ceiling that
// doubles with each attempt from twice BackoffMin, capped at BackoffMax, so that messages failing
// together do not come back together, not even after their first failure.
func (d *Dispatcher) backoff(attempt int) time.Duration {
	ceiling := d.cfg.BackoffMax
	if shift := attempt; shift < 32 {
		ceiling = min(d.cfg.BackoffMin<<shift, d.cfg.BackoffMax)
	}
	if ceiling <= d.cfg.BackoffMin {
		return d.cfg.BackoffMin
	}
	return d.cfg.BackoffMin + rand.N(ceiling-d.cfg.BackoffMin)
}

// maintain prunes delivered messages past retention (pruneRound) and refreshes the backlog
// gauges; it logs rather than returns its errors, which the next round retries.
func (d *Dispatcher) maintain(ctx context.Context) {
	d.pruneRound(ctx)
	st, err := d.o.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("backlog stats failed", "err", err)
		}
		return
	}
	d.met.Gauge(MetricBacklog).Update(float64(st.Pending))
	d.met.Gauge(MetricOldestAge).Update(st.OldestPending.Seconds())
	d.met.Gauge(MetricDeadRows).Update(float64(st.Dead))
}

// pruneRound prunes delivered messages past retention, batch after batch until a short one, for
// at most pruneRoundBatches batches, and records in d.behind whether more are waiting; it logs
// rather than returns its errors, which the next round retries.
func (d *Dispatcher) pruneRound(ctx context.Context) {
	var pruned int64
	for batches := 1; batches <= pruneRoundBatches; batches++ {
		n, ok := d.pruneOnce(ctx)
		pruned += n
		if !ok || n < PruneBatchDefault {
			break
		}
	}
	if pruned > 0 {
		d.log.Debug("pruned delivered messages past retention", "count", pruned, "more", d.behind.Load())
	}
}

// pruneOnce prunes one batch of delivered messages past retention, records in d.behind whether
// more are waiting (the batch came back full), and returns how many it pruned and whether it
// succeeded.
func (d *Dispatcher) pruneOnce(ctx context.Context) (int64, bool) {
	n, err := d.o.Prune(ctx, PruneBatchDefault)
	d.met.Counter(MetricPruned).Inc(n)
	if err != nil {
		// Pruning waits for the next maintenance: a database that fails it is not asked again
		// between every batch.
		d.behind.Store(false)
		if ctx.Err() == nil {
			d.log.Warn("prune failed; retrying at the next maintenance", "err", err)
		}
		return n, false
	}
	d.behind.Store(n == PruneBatchDefault)
	return n, true
}
