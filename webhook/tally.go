// What a handler counts for the webhook_tallies table, and how the counts get there.

package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/schema"
)

// TallyEveryDefault is how often, at most, a handler adds what it counted to the schema's
// webhook_tallies table (HandlerConfig.TallyEvery).
const TallyEveryDefault = 5 * time.Second

// tallyTimeout bounds one flush's statement: a flush that waits longer is given up, its counts
// kept for the next.
const tallyTimeout = 10 * time.Second

// kind is what became of a delivery, as the metrics tag it and webhook_tallies counts it: an
// outcome and, for a refusal or a failure, its reason. The set is fixed here, so that what a
// handler holds in memory is one array, whatever it is sent, and no text a sender chose becomes
// a key or a row.
type kind uint8

const (
	kindAccepted kind = iota
	kindDuplicate
	refusedMethod
	refusedTenant
	refusedOversized
	refusedUnreadable
	refusedSignature
	refusedStale
	refusedMalformed
	refusedMismatch
	failedStore
	failedTopic
	kinds // how many there are
)

// kindNames are each kind's outcome and reason, as webhook_tallies stores them; the reason is
// also the tag MetricRefused and MetricFailed are counted with.
var kindNames = [kinds]struct{ outcome, reason string }{
	kindAccepted:      {schema.TallyAccepted, ""},
	kindDuplicate:     {schema.TallyDuplicate, ""},
	refusedMethod:     {schema.TallyRefused, "method"},
	refusedTenant:     {schema.TallyRefused, "tenant"},
	refusedOversized:  {schema.TallyRefused, "oversized"},
	refusedUnreadable: {schema.TallyRefused, "unreadable"},
	refusedSignature:  {schema.TallyRefused, "signature"},
	refusedStale:      {schema.TallyRefused, "stale"},
	refusedMalformed:  {schema.TallyRefused, "malformed"},
	refusedMismatch:   {schema.TallyRefused, "mismatch"},
	failedStore:       {schema.TallyFailed, "store"},
	failedTopic:       {schema.TallyFailed, "topic"},
}

// tally counts a handler's deliveries in memory and adds them to webhook_tallies in the
// background: the first count after a flush schedules the next flush TallyEvery later, so that
// there is at most one flush per interval, one at a time, whatever the traffic, and none while
// nothing is counted. A request only adds to an array and, once per interval, starts a timer; it
// never waits for the database.
type tally struct {
	counts [kinds]atomic.Int64
	every  time.Duration
	write  func(ctx context.Context, outcomes, reasons []string, counts []int64) error
	log    *slog.Logger
	// after runs f once d has passed, and returns what cancels it (time.AfterFunc's Stop). The
	// tests put a timer they fire themselves in its place.
	after func(d time.Duration, f func()) (stop func() bool)

	// armed is true from the moment a flush is scheduled until it has run.
	armed atomic.Bool
	// turn is held by the one flush that runs (a capacity of one), so that a Close waits for the
	// timer's flush, and the two never send the same counts.
	turn chan struct{}

	mu     sync.Mutex // guards what follows
	stop   func() bool
	closed bool
}

func newTally(every time.Duration, log *slog.Logger, write func(ctx context.Context, outcomes, reasons []string, counts []int64) error) *tally {
	return &tally{every: every, log: log, write: write, turn: make(chan struct{}, 1),
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// add counts one delivery of kind k, and schedules a flush unless one is.
func (t *tally) add(k kind) {
	t.counts[k].Add(1)
	t.arm()
}

func (t *tally) arm() {
	if t.armed.Load() || !t.armed.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return // Close flushed; it flushes again when called again
	}
	t.stop = t.after(t.every, t.fire)
}

// fire is the scheduled flush. A count added while it ran, which saw it armed and scheduled
// nothing, schedules the next here: armed is cleared before the counts are looked at again.
func (t *tally) fire() {
	ctx, cancel := context.WithTimeout(context.Background(), tallyTimeout)
	defer cancel()
	if err := t.flush(ctx); err != nil {
		t.log.Warn("webhook tallies not recorded; keeping them for the next flush (the metrics count them meanwhile)", "err", err)
	}
	t.armed.Store(false)
	for k := range kinds {
		if t.counts[k].Load() > 0 {
			t.arm()
			return
		}
	}
}

// flush sends what was counted since the last flush in one statement, and nothing when nothing
// was. On an error the counts are put back, for the next flush.
func (t *tally) flush(ctx context.Context) error {
	select {
	case t.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-t.turn }()
	var taken [kinds]int64
	var outcomes, reasons []string
	var counts []int64
	for k := range kinds {
		if taken[k] = t.counts[k].Swap(0); taken[k] > 0 {
			outcomes = append(outcomes, kindNames[k].outcome)
			reasons = append(reasons, kindNames[k].reason)
			counts = append(counts, taken[k])
		}
	}
	if len(counts) == 0 {
		return nil
	}
	if err := t.write(ctx, outcomes, reasons, counts); err != nil {
		for k, n := range taken {
			t.counts[k].Add(n)
		}
		return err
	}
	return nil
}

// close stops the scheduled flush and flushes what is left, after the flush that may be running.
func (t *tally) close(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	stop := t.stop
	t.mu.Unlock()
	if stop != nil {
		stop()
	}
	return t.flush(ctx)
}

// addTallies adds $2's outcomes, $3's reasons and $4's counts of source $1 to the current
// minute's rows of %s: one statement for everything a flush sends. Two handlers of one source
// (two processes) add to the same rows; the upsert makes their counts a sum.
const addTallies = `
INSERT INTO %s AS t (minute, source, outcome, reason, count)
SELECT date_trunc('minute', now()), $1, u.outcome, u.reason, u.count
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(outcome, reason, count)
ON CONFLICT (minute, source, outcome, reason) DO UPDATE SET count = t.count + excluded.count`

// tallyWriter returns what writes a flush of source's counts to schemaName's webhook_tallies.
func tallyWriter(db *pgxpool.Pool, schemaName, source string) func(ctx context.Context, outcomes, reasons []string, counts []int64) error {
	stmt := fmt.Sprintf(addTallies, schema.WebhookTalliesTable(schemaName))
	return func(ctx context.Context, outcomes, reasons []string, counts []int64) error {
		if _, err := db.Exec(ctx, stmt, source, outcomes, reasons, counts); err != nil {
			return fmt.Errorf("webhook: record the tallies of source %q: %w", source, schema.Explain(err, schemaName))
		}
		return nil
	}
}

// Close adds to the schema's webhook_tallies what the handler counted and has not added yet,
// after the flush that may be running, and stops the handler's flushes. Call it once the server
// has stopped sending it requests (after http.Server.Shutdown): a delivery answered after Close
// is counted in the metrics, and in the tallies only by another Close. It returns ctx's error
// when ctx ends first, and the database's when the counts could not be written; either way they
// are kept, for another Close.
//
// Without Close, what was counted in the last TallyEvery before the process ends is lost from
// the tallies (the metrics have it), as is what a process that dies held: the tallies are an
// operator's view of recent traffic, not an exact count.
func (h *Handler) Close(ctx context.Context) error {
	return h.tally.close(ctx)
}
