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
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/schema"
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
	// ListenBackoffDefault is the pause before listening again after the connection was lost.
	ListenBackoffDefault  = time.Second
	publishTimeoutDivisor = 2 // the default publish timeout is the lease divided by this
)

// Metric names, emitted through DispatcherConfig.Metrics.
const (
	MetricDelivered = "tempotent_outbox_delivered"      // counter: messages marked delivered
	MetricRetried   = "tempotent_outbox_retried"        // counter: failed attempts that will be retried
	MetricDead      = "tempotent_outbox_dead"           // counter: messages parked as dead
	MetricLostClaim = "tempotent_outbox_lost_claim"     // counter: marks refused because the claim had ended
	MetricBacklog   = "tempotent_outbox_backlog"        // gauge: pending messages
	MetricOldestAge = "tempotent_outbox_oldest_seconds" // gauge: age of the oldest pending message
	MetricDeadRows  = "tempotent_outbox_dead_rows"      // gauge: dead messages waiting for an operator
)

// DispatcherConfig configures a Dispatcher. The zero value is valid.
type DispatcherConfig struct {
	// Name identifies this dispatcher in the claims it makes (the outbox's claimed_by column).
	// Default: host name, process ID and a random suffix.
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
	Lease time.Duration
	// PublishTimeout bounds one Publish call; it must leave the lease time to mark the result.
	// Default Lease/2.
	PublishTimeout time.Duration
	// Poll is how often the dispatcher looks for messages when no notification wakes it (and
	// for messages whose backoff has ended). Default PollDefault.
	Poll time.Duration
	// BackoffMin and BackoffMax bound the delay before a failed message is claimed again: it
	// doubles with each attempt from BackoffMin, capped at BackoffMax, with full jitter.
	BackoffMin, BackoffMax time.Duration
	// MaxAttempts is how many claims a message gets before it is parked as dead. A claim counts
	// when it is made, so a message that crashes its dispatcher every time still gets there.
	// Default MaxAttemptsDefault.
	MaxAttempts int
	// Maintenance is how often Run prunes delivered messages past the outbox's retention and
	// refreshes the backlog gauges. Default MaintenanceDefault; negative turns both off.
	Maintenance time.Duration
	// Metrics receives the dispatcher's counters and gauges (the Metric constants): give the
	// Temporal client's handler to have them beside the worker's. Default: none.
	Metrics client.MetricsHandler
	// Logger logs failed attempts and dead messages. Default slog.Default().
	Logger *slog.Logger
}

// Dispatcher delivers an outbox's messages through a Publisher: at least once, never one message
// from two calls at once, retrying with backoff, parking poison messages as dead. Run any number
// of dispatchers on one outbox, in one process or many; they share the work through
// FOR UPDATE SKIP LOCKED and leases.
//
// "Never at once" rests on the lease: a claim's Publish is cancelled at PublishTimeout, before
// the lease ends, and only the claim's own dispatcher can mark the result. A process frozen (not
// dead) for longer than the lease can still be publishing when another claims the message, as
// with any lease; receivers deduplicate on the message ID for that reason too.
type Dispatcher struct {
	o   *Outbox
	pub Publisher
	cfg DispatcherConfig
	log *slog.Logger
	met client.MetricsHandler
}

// NewDispatcher returns a dispatcher of o's messages through pub.
func NewDispatcher(o *Outbox, pub Publisher, cfg *DispatcherConfig) (*Dispatcher, error) {
	if o == nil || pub == nil {
		return nil, errors.New("outbox.NewDispatcher: the outbox and the publisher are required")
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
	switch {
	case c.Batch < 0 || c.Concurrency < 0 || c.MaxAttempts < 0:
		return nil, fmt.Errorf("outbox.NewDispatcher: Batch (%d), Concurrency (%d) and MaxAttempts (%d) must be positive, or 0 for the default",
			c.Batch, c.Concurrency, c.MaxAttempts)
	case c.Lease < 0 || c.PublishTimeout < 0 || c.Poll < 0 || c.BackoffMin < 0 || c.BackoffMax < 0:
		return nil, errors.New("outbox.NewDispatcher: durations must be positive, or 0 for the default")
	case c.PublishTimeout >= c.Lease:
		return nil, fmt.Errorf("outbox.NewDispatcher: PublishTimeout %s must be shorter than Lease %s, which must also cover marking the result",
			c.PublishTimeout, c.Lease)
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
func (d *Dispatcher) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { d.listen(ctx, wake) })

	poll := time.NewTicker(d.cfg.Poll)
	defer poll.Stop()
	var maintain <-chan time.Time
	if d.cfg.Maintenance > 0 {
		t := time.NewTicker(d.cfg.Maintenance)
		defer t.Stop()
		maintain = t.C
		d.maintain(ctx)
	}
	for {
		// Drain: a full batch says there may be more.
		for {
			n, err := d.DispatchOnce(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				d.log.Warn("claim failed; retrying at the next poll", "err", err)
				break
			}
			if n < d.cfg.Batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		case <-maintain:
			d.maintain(ctx)
		}
	}
}

// listen holds a connection that LISTENs for Put's notifications and signals wake for each one
// of this outbox's schema. On any error it drops the connection and listens again after a pause;
// the poll covers the gap.
func (d *Dispatcher) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		d.log.Debug("listen ended; polling until it is back", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(ListenBackoffDefault):
		}
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := d.o.db.Acquire(ctx)
	if err != nil {
		return err
	}
	// A LISTENing connection must not go back to the pool.
	defer func() { _ = conn.Hijack().Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{notifyChannel}.Sanitize()); err != nil {
		return err
	}
	// A message put while no connection was listening (before the first LISTEN, or between a
	// lost connection and this one) notified no one: one round now finds it, rather than the
	// next poll.
	signal(wake)
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == d.o.cfg.Schema {
			signal(wake)
		}
	}
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
	delivery Delivery
	err      error // Publish's result
}

// DispatchOnce claims one batch, publishes it and marks the results, and returns how many
// messages it claimed. Run calls it in a loop; call it yourself to dispatch from a job of your
// own.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	batch, err := d.claim(ctx)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	d.publish(ctx, batch)
	failpoint.Hit(failpoint.AfterPublish)
	// Marks go out even when ctx has ended: a delivered message left unmarked is delivered
	// again. They are bounded by what remains of the lease.
	markCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Lease-d.cfg.PublishTimeout)
	defer cancel()
	return len(batch), d.mark(markCtx, batch)
}

// claim takes up to Batch ready messages: pending, out of backoff, not under a live claim, and,
// for ordered ones, with no undelivered message before them on their key. It counts the attempt
// now, and parks as dead the messages that have had MaxAttempts claims already, instead of
// handing them out again.
func (d *Dispatcher) claim(ctx context.Context) ([]*claimed, error) {
	var topics []string
	if len(d.cfg.Topics) > 0 {
		topics = d.cfg.Topics
	}
	res := d.o.db.SendBatch(ctx, claimBatch(d.o.table, topics, d.cfg.Batch, d.cfg.Lease, d.cfg.MaxAttempts, d.cfg.Name))
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", schema.Explain(err, d.o.cfg.Schema))
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", schema.Explain(err, d.o.cfg.Schema))
	}
	var batch []*claimed
	for rows.Next() {
		var c claimed
		var state string
		m := &c.delivery
		if err := rows.Scan(&c.seq, &state, &m.ID, &m.Topic, &m.OrderingKey, &m.Payload, &m.Headers, &m.Attempt, &m.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		if state == "dead" {
			d.met.Counter(MetricDead).Inc(1)
			d.log.Error("message parked as dead: it used up its attempts without an outcome", "id", m.ID, "topic", m.Topic, "attempts", m.Attempt-1)
			continue
		}
		batch = append(batch, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	if err := res.Close(); err != nil { // the claim's commit
		return nil, fmt.Errorf("outbox: claim: %w", err)
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
// lease in microseconds, $4 MaxAttempts, $5 the dispatcher's name.
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
			attempts    = m.attempts + 1,
			lease_until = CASE WHEN m.attempts < $4 THEN now() + $3::bigint * interval '1 microsecond' END,
			claimed_by  = $5,
			state       = CASE WHEN m.attempts < $4 THEN 'pending' ELSE 'dead' END,
			last_error  = CASE WHEN m.attempts < $4 THEN m.last_error
			                   ELSE format('claimed %s times without a recorded outcome (the dispatcher died or lost its claim each time); last error: %s', m.attempts, coalesce(m.last_error, 'none')) END
		FROM ready WHERE m.seq = ready.seq
		RETURNING m.seq, m.state, m.id, m.topic, coalesce(m.ordering_key, ''), m.payload, m.headers, m.attempts, m.created_at`
}

// publish publishes batch with up to Concurrency calls at once, each bounded by PublishTimeout.
func (d *Dispatcher) publish(ctx context.Context, batch []*claimed) {
	sem := make(chan struct{}, d.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, c := range batch {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
			defer cancel()
			c.err = d.publishOne(pctx, c.delivery)
		})
	}
	wg.Wait()
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
// or dead. A row whose claim was lost (its lease ended and another dispatcher claimed it) is
// left alone.
func (d *Dispatcher) mark(ctx context.Context, batch []*claimed) error {
	var seqs []int64
	var attempts []int32
	b := &pgx.Batch{}
	for _, c := range batch {
		if c.err == nil {
			seqs = append(seqs, c.seq)
			attempts = append(attempts, int32(c.delivery.Attempt))
			continue
		}
		msg := c.err.Error()
		if IsPermanent(c.err) || c.delivery.Attempt >= d.cfg.MaxAttempts {
			b.Queue(`UPDATE `+d.o.table+` SET state = 'dead', lease_until = NULL, last_error = $4
				WHERE seq = $1 AND attempts = $2 AND claimed_by = $3 AND state = 'pending'`,
				c.seq, c.delivery.Attempt, d.cfg.Name, msg).Exec(func(ct pgconn.CommandTag) error {
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
			c.seq, c.delivery.Attempt, d.cfg.Name, backoff.Microseconds(), msg).Exec(func(ct pgconn.CommandTag) error {
			d.counted(ct, MetricRetried, c)
			d.log.Warn("publish failed; will retry", "id", c.delivery.ID, "topic", c.delivery.Topic, "attempt", c.delivery.Attempt, "in", backoff, "err", msg)
			return nil
		})
	}
	if len(seqs) > 0 {
		b.Queue(`UPDATE `+d.o.table+` m SET state = 'delivered', delivered_at = now(), lease_until = NULL
			FROM unnest($1::bigint[], $2::int[]) AS r(seq, attempts)
			WHERE m.seq = r.seq AND m.attempts = r.attempts AND m.claimed_by = $3 AND m.state = 'pending'`,
			seqs, attempts, d.cfg.Name).Exec(func(ct pgconn.CommandTag) error {
			d.met.Counter(MetricDelivered).Inc(ct.RowsAffected())
			if lost := int64(len(seqs)) - ct.RowsAffected(); lost > 0 {
				d.met.Counter(MetricLostClaim).Inc(lost)
				d.log.Warn("delivered messages whose claim had ended: they will be delivered again", "count", lost)
			}
			return nil
		})
	}
	if err := d.o.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("outbox: mark %d results (the messages will be delivered again after their lease): %w", len(batch), err)
	}
	return nil
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

// backoff is the delay after a failed attempt: exponential from BackoffMin, capped at BackoffMax,
// with full jitter so that messages failing together do not come back together.
func (d *Dispatcher) backoff(attempt int) time.Duration {
	ceiling := d.cfg.BackoffMax
	if shift := attempt - 1; shift < 32 {
		ceiling = min(d.cfg.BackoffMin<<shift, d.cfg.BackoffMax)
	}
	if ceiling <= d.cfg.BackoffMin {
		return d.cfg.BackoffMin
	}
	return d.cfg.BackoffMin + rand.N(ceiling-d.cfg.BackoffMin)
}

// maintain prunes delivered messages past retention and refreshes the backlog gauges; it logs
// rather than returns its errors, which the next round retries.
func (d *Dispatcher) maintain(ctx context.Context) {
	if _, err := d.o.Prune(ctx, PruneBatchDefault); err != nil && ctx.Err() == nil {
		d.log.Warn("prune failed; retrying at the next maintenance", "err", err)
	}
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
