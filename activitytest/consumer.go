package activitytest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/inbox"
)

// ConsumerCheck is a message consumer as RequireConsumedOnce runs it: a handler that takes one
// delivery of a message and records it in an inbox (inbox.Inbox's Process or Claim).
type ConsumerCheck struct {
	// DB is the database the consumer writes to, with tempotent's migrations applied in the
	// inbox's schema (NewSchema gives one). The check opens a pool of its own like it (its
	// Config), through which it kills a delivery's connection as a crash does, and gives that
	// pool to Consumer. Required.
	DB *pgxpool.Pool
	// Consumer builds the consumer under test on db and returns its handler: what your broker or
	// webhook intake calls with one delivery. A nil error acknowledges the delivery; an error
	// leaves the message to be delivered again. Required; the check calls it once.
	Consumer func(db *pgxpool.Pool) func(ctx context.Context, m inbox.Message) error
	// Inbox is the consumer's inbox configuration (Consumer and Schema): the check asks an inbox
	// of it whether a message is recorded. Required.
	Inbox inbox.Config
	// Message returns the message the producer sends under id; each path delivers a message of
	// its own. Default: inbox.Message{ID: id}.
	Message func(id string) inbox.Message
	// Effects counts the consumer's effects so far: the rows it wrote, the calls of a fake.
	// Required. The check wants one effect per message, so nothing else may add to it while
	// the check runs.
	Effects func() int
}

// The paths RequireConsumedOnce runs, as its failures name them.
const (
	PathDeliveredAgain   = "the same message delivered again, one delivery after another"
	PathDeliveredAtOnce  = "deliveries of the same message at once"
	PathConnectionKilled = "the connection killed after the handler's effect, before the commit, then a redelivery"
	PathContextCancelled = "the context cancelled after the handler's effect, as the commit is sent, then a redelivery"
)

const (
	consumerDeliveries    = 3 // deliveries of one message, one after another
	consumerConcurrent    = 4 // deliveries of one message at once
	consumerRedeliveryMax = 6 // redeliveries of a message whose delivery failed
)

// RequireConsumedOnce delivers messages to c's consumer as a broker that delivers at least
// once does, on the real Postgres, and fails tb unless every message had exactly one effect
// (counted by c.Effects), every delivery but a crashed one was acknowledged in the end, and the
// inbox recorded the message:
//
//   - the same message delivered again, one delivery after another: the later ones are
//     acknowledged without an effect;
//   - deliveries of the same message at once: the first delivery's commit is held until every
//     other one is waiting for it (on the inbox's row lock) or has returned, so that they
//     overlap; one has the effect, and the others, redelivered while they fail (an
//     inbox.InProgressError), are acknowledged;
//   - the connection killed after the handler's effect, before the commit (a worker killed, a
//     database failover), then a redelivery: the crashed delivery must leave no effect — a
//     consumer that has its effect outside the inbox's transaction (another connection, an HTTP
//     call) keeps it and has it again on the redelivery — and must not be acknowledged;
//   - the same with the context cancelled as the commit is sent (a shutdown).
//
// The crash is the next COMMIT sent through the pool the check gives Consumer: a consumer that
// commits elsewhere, or not at all, fails the check, which says so.
func RequireConsumedOnce(tb testing.TB, c ConsumerCheck) {
	tb.Helper()
	if asWorker != nil {
		return // a worker process (process.go) runs one attempt of a RequireRetrySafe
	}
	if c.DB == nil || c.Consumer == nil || c.Effects == nil || c.Inbox.Consumer == "" {
		tb.Fatalf("activitytest: RequireConsumedOnce needs ConsumerCheck.DB, Consumer, Effects and Inbox (at least its Consumer)")
	}
	if c.Message == nil {
		c.Message = func(id string) inbox.Message { return inbox.Message{ID: id} }
	}
	ib, err := inbox.New(c.DB, c.Inbox)
	if err != nil {
		tb.Fatalf("activitytest: ConsumerCheck.Inbox: %v", err)
	}
	cr := &consumerRun{tb: tb, c: c, inbox: ib, app: "activitytest-consumer-" + randomHex(6)}
	cr.open()
	cr.handle = c.Consumer(cr.pool)
	if cr.handle == nil {
		tb.Fatalf("activitytest: ConsumerCheck.Consumer returned no handler")
	}
	cr.deliveredAgain()
	cr.deliveredAtOnce()
	cr.crashBeforeCommit(PathConnectionKilled, cr.killConnection)
	cr.crashBeforeCommit(PathContextCancelled, cancelCommit)
}

// consumerRun runs one ConsumerCheck.
type consumerRun struct {
	tb     testing.TB
	c      ConsumerCheck
	inbox  *inbox.Inbox
	pool   *pgxpool.Pool // the consumer's, through which commits are traced
	app    string        // its application_name, by which the check finds its backends
	handle func(context.Context, inbox.Message) error

	mu      sync.Mutex
	atStart func(ctx context.Context, conn *pgx.Conn) context.Context // run at the next COMMIT, once
	fired   bool
}

// open makes the consumer's pool: DB's configuration, its own application name, room for every
// concurrent delivery to hold two connections, and a tracer that runs the armed fault at the
// next COMMIT.
func (r *consumerRun) open() {
	cfg := r.c.DB.Config().Copy()
	cfg.MaxConns = max(cfg.MaxConns, 2*consumerConcurrent+2)
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = r.app
	cfg.ConnConfig.Tracer = &commitTracer{run: r, next: cfg.ConnConfig.Tracer}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		r.tb.Fatalf("activitytest: open a pool like ConsumerCheck.DB: %v", err)
	}
	r.tb.Cleanup(pool.Close)
	r.pool = pool
}

// arm makes fault run at the next COMMIT sent through the consumer's pool.
func (r *consumerRun) arm(fault func(ctx context.Context, conn *pgx.Conn) context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.atStart, r.fired = fault, false
}

// disarm ends the armed fault and reports whether it ran.
func (r *consumerRun) disarm() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.atStart = nil
	return r.fired
}

// commitTracer runs the armed fault at the first COMMIT after arm.
type commitTracer struct {
	run  *consumerRun
	next pgx.QueryTracer // DB's own tracer, if it has one
}

func (t *commitTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if t.next != nil {
		ctx = t.next.TraceQueryStart(ctx, conn, data)
	}
	if !strings.EqualFold(strings.TrimSpace(data.SQL), "commit") {
		return ctx
	}
	t.run.mu.Lock()
	fault := t.run.atStart
	t.run.atStart, t.run.fired = nil, t.run.fired || fault != nil
	t.run.mu.Unlock()
	if fault != nil {
		ctx = fault(ctx, conn)
	}
	return ctx
}

func (t *commitTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if t.next != nil {
		t.next.TraceQueryEnd(ctx, conn, data)
	}
}

// deliver runs one delivery of m, as a broker calls the consumer.
func (r *consumerRun) deliver(m inbox.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.handle(ctx, m)
}

// redeliver delivers m until a delivery is acknowledged, at most consumerRedeliveryMax times,
// and returns the errors of those that were not.
func (r *consumerRun) redeliver(m inbox.Message) (errs []string, acked bool) {
	for n := range consumerRedeliveryMax {
		err := r.deliver(m)
		if err == nil {
			return errs, true
		}
		errs = append(errs, fmt.Sprintf("redelivery %d: %v", n+1, err))
	}
	return errs, false
}

// message returns the message of a path, under an ID of its own.
func (r *consumerRun) message(name string) inbox.Message {
	return r.c.Message(fmt.Sprintf("%s/%s/%s", r.tb.Name(), name, randomHex(4)))
}

// recorded reports whether the inbox holds m's record: a Claim in a transaction rolled back
// afterwards finds it.
func (r *consumerRun) recorded(path string, m inbox.Message) bool {
	ctx := context.Background()
	tx, err := r.c.DB.Begin(ctx)
	if err != nil {
		r.tb.Fatalf("activitytest: %s: read the inbox: %v", path, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	first, err := r.inbox.Claim(ctx, tx, inbox.Message{ID: m.ID})
	if err != nil {
		r.tb.Fatalf("activitytest: %s: read the inbox: %v", path, err)
	}
	return !first
}

// requireOnce fails tb unless m had n == 1 effect and the inbox recorded it.
func (r *consumerRun) requireOnce(path string, m inbox.Message, n int) {
	r.tb.Helper()
	switch {
	case n == 0:
		r.tb.Errorf("activitytest: %s: 0 effects for message %q, want 1: the consumer acknowledged it without its effect, or ConsumerCheck.Effects does not count it", path, m.ID)
	case n > 1:
		r.tb.Errorf("activitytest: %s: %d effects for message %q, want 1: a redelivery had the effect again. Have the effect in the transaction of inbox.Process (through its tx), or in yours after inbox.Claim returned first", path, n, m.ID)
	}
	if !r.recorded(path, m) {
		r.tb.Errorf("activitytest: %s: the inbox of consumer %q has no record of message %q: the consumer did not process it through that inbox under the message's ID", path, r.c.Inbox.Consumer, m.ID)
	}
}

func (r *consumerRun) deliveredAgain() {
	r.tb.Helper()
	m, before := r.message("again"), r.c.Effects()
	for n := range consumerDeliveries {
		if err := r.deliver(m); err != nil {
			r.tb.Errorf("activitytest: %s: delivery %d failed: %v", PathDeliveredAgain, n+1, err)
		}
	}
	r.requireOnce(PathDeliveredAgain, m, r.c.Effects()-before)
}

func (r *consumerRun) deliveredAtOnce() {
	r.tb.Helper()
	m, before := r.message("at-once"), r.c.Effects()
	var returned atomic.Int32
	r.arm(func(ctx context.Context, _ *pgx.Conn) context.Context {
		r.awaitOthers(returned.Load)
		return ctx
	})
	start := make(chan struct{})
	errs := make([]error, consumerConcurrent)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			<-start
			errs[i] = r.deliver(m)
			returned.Add(1)
		})
	}
	close(start)
	wg.Wait()
	r.disarm()
	var failed []string
	for i, err := range errs {
		if err == nil {
			continue
		}
		if more, acked := r.redeliver(m); !acked {
			failed = append(failed, fmt.Sprintf("delivery %d: %v; %s", i+1, err, strings.Join(more, "; ")))
		}
	}
	if len(failed) > 0 {
		r.tb.Errorf("activitytest: %s: deliveries still failing after %d redeliveries: %s", PathDeliveredAtOnce, consumerRedeliveryMax, strings.Join(failed, " | "))
	}
	r.requireOnce(PathDeliveredAtOnce, m, r.c.Effects()-before)
}

// awaitOthers holds the first commit until every other delivery is waiting on a lock or has
// returned (returned counts those), so that the deliveries overlap; a delivery that takes no
// lock (a consumer without an inbox) has returned by then.
func (r *consumerRun) awaitOthers(returned func() int32) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		var waiting int32
		err := r.c.DB.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", r.app).Scan(&waiting)
		if err != nil {
			r.tb.Errorf("activitytest: %s: watch the deliveries wait: %v", PathDeliveredAtOnce, err)
			return
		}
		if waiting+returned() >= consumerConcurrent-1 {
			return
		}
		select {
		case <-ctx.Done():
			r.tb.Errorf("activitytest: %s: the other deliveries neither waited for the first one nor returned within a minute", PathDeliveredAtOnce)
			return
		case <-time.After(5 * time.Millisecond): // polls a state Postgres does not announce
		}
	}
}

// crashBeforeCommit delivers a message whose transaction is crashed by fault as its COMMIT is
// sent, then delivers it again until it is acknowledged.
func (r *consumerRun) crashBeforeCommit(path string, fault func(context.Context, *pgx.Conn) context.Context) {
	r.tb.Helper()
	m, before := r.message("crash"), r.c.Effects()
	r.arm(fault)
	err := r.deliver(m)
	if !r.disarm() {
		r.tb.Fatalf("activitytest: %s: the delivery committed nothing through the pool the check gave ConsumerCheck.Consumer: build the consumer's inbox on that pool, so that the check can crash its commit", path)
	}
	if err == nil {
		r.tb.Errorf("activitytest: %s: the delivery was acknowledged though its transaction did not commit: the broker drops the message, and its effect is lost. Return the error of inbox.Process (or of your commit) to the broker", path)
	}
	if n := r.c.Effects() - before; n != 0 {
		r.tb.Errorf("activitytest: %s: the crashed delivery left %d effect(s) for message %q, want 0: the effect is outside the inbox's transaction, so it stays when the record rolls back, and the redelivery has it again. Write it through the tx inbox.Process gives the handler (or the one you passed to inbox.Claim)", path, n, m.ID)
	}
	if errs, acked := r.redeliver(m); !acked {
		r.tb.Errorf("activitytest: %s: the redeliveries failed: %s", path, strings.Join(errs, "; "))
	}
	r.requireOnce(path, m, r.c.Effects()-before)
}

// killConnection terminates the backend of conn, and waits until it is gone, before the COMMIT
// is sent on it: the transaction rolls back as when its worker or the database's host dies.
func (r *consumerRun) killConnection(ctx context.Context, conn *pgx.Conn) context.Context {
	var gone bool
	err := r.c.DB.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 60000)", conn.PgConn().PID()).Scan(&gone)
	if err != nil || !gone {
		r.tb.Errorf("activitytest: %s: terminate the delivery's connection: %v (terminated: %v)", PathConnectionKilled, err, gone)
	}
	return ctx
}

// cancelCommit cancels the COMMIT's context before it is sent: pgx sends nothing and closes the
// connection, and the transaction rolls back, as when a worker shuts down mid-delivery.
func cancelCommit(ctx context.Context, _ *pgx.Conn) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return ctx
}
