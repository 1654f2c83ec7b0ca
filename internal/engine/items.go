package engine

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
)

// Progress is what ForEach records as the activity's heartbeat details after each item: how far
// the attempt has come, for whoever reads it (the Temporal UI, a human). A retry does not need
// it, since every item's receipt says whether it is settled.
type Progress struct {
	// Settled is how many items have a final outcome (ItemResult.Settled): a result, new or
	// replayed, or a recorded error. An item that failed with a retryable error, left to the
	// activity's retry, is not settled.
	Settled int
	// Failed is how many of the settled items have a recorded error (a decline, a payload
	// mismatch): final, so no retry runs them. {Settled: 403, Failed: 3, Total: 1000} reads "400
	// done, 3 declined, 597 left".
	Failed int
	// Total is how many items the call runs or replays: each item ID once, without the items
	// refused before they run (an invalid ID).
	Total int
}

// parallel calls each for every index, at most n at once, and returns when all returned. A
// panic in each is raised again in the caller once the others are done, where the SDK turns it
// into the activity's error, as it does for a panic in the activity itself; left in a goroutine
// of its own, it would end the worker process.
func parallel(indexes []int, n int, each func(int)) {
	if n == 1 {
		for _, i := range indexes {
			each(i)
		}
		return
	}
	var (
		next     = make(chan int)
		wg       sync.WaitGroup
		panicked atomic.Pointer[any]
	)
	for range min(n, len(indexes)) {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					panicked.CompareAndSwap(nil, &r)
					for range next { // let the sender finish
					}
				}
			}()
			for i := range next {
				if panicked.Load() == nil {
					each(i)
				}
			}
		})
	}
	for _, i := range indexes {
		next <- i
	}
	close(next)
	wg.Wait()
	if r := panicked.Load(); r != nil {
		panic(*r)
	}
}

// batchCall is the call ForEach's items derive from — the receipt the activity runs under, or
// the activity's own key when it runs without one —, the items' operation (the pass's name), and
// the passes the attempt ran.
type batchCall struct {
	Call
	operation string
	passes    *passes
}

func (s *Store) batchCall(ctx context.Context, operation string) (batchCall, error) {
	if rc, _ := ctx.Value(runningKey{}).(*running); rc != nil {
		c := rc.call
		if !c.runsAgain(s.cfg.Retention) {
			return batchCall{}, fmt.Errorf("activity.ForEach: %w: %s runs under a receipt whose downstream is not declared safe to call again, so a retry after a crash would find it holding an unknown outcome instead of running the items that are left; register it with Options{Batch: true}, or as a plain activity",
				ErrMisconfigured, ref(c.Key))
		}
		return batchCall{Call: c, operation: operation, passes: &rc.passes}, nil
	}
	if !sdkactivity.IsActivity(ctx) {
		return batchCall{}, fmt.Errorf("activity.ForEach: %w: call it inside an activity, or inside Do's function", ErrMisconfigured)
	}
	attempt, _ := ctx.Value(interceptedKey{}).(*passes)
	if attempt == nil {
		return batchCall{}, fmt.Errorf("activity.ForEach: %w", errNoInterceptor("an activity that calls ForEach"))
	}
	k, err := keys.FromActivity(ctx)
	if err != nil {
		return batchCall{}, err
	}
	return batchCall{Call: Call{Key: k, ScheduledAt: sdkactivity.GetInfo(ctx).ScheduledTime},
		operation: operation, passes: attempt}, nil
}

// passes are the ForEach passes of one attempt, by name (Items.Operation): the item and result
// types each ran with.
type passes struct {
	mu  sync.Mutex
	ran map[string]passTypes
}

type passTypes struct{ in, out reflect.Type }

// claim records that the pass operation runs over items of type in with results of type out.
// It refuses a name that ran in this attempt with other types: two passes under one name, the
// second of which would replay the first's receipts (and decode their results as another type).
// The same types again are the same pass, by the user's naming (a loop that retries the
// unfinished items).
func (p *passes) claim(operation string, in, out reflect.Type) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := passTypes{in, out}
	if prev, ok := p.ran[operation]; ok && prev != now {
		return fmt.Errorf("the pass %q already ran in this attempt over items of type %v with results of type %v, and now runs with %v and %v; under one name a second pass would replay the first pass's receipts instead of running: give each pass its own Items.Operation",
			operation, prev.in, prev.out, in, out)
	}
	if p.ran == nil {
		p.ran = map[string]passTypes{}
	}
	p.ran[operation] = now
	return nil
}

// item is the call of the batch's item id.
func (b batchCall) item(id string, item any, o Options) (Call, error) {
	k, err := b.Key.Item(id)
	if err != nil {
		return Call{Key: b.Key}, err
	}
	k.Operation = b.operation
	return Call{
		Key:                    k,
		Request:                item,
		ScheduledAt:            b.ScheduledAt,
		DownstreamDeduplicates: o.DownstreamDeduplicates,
		DownstreamKeyMemory:    o.DownstreamKeyMemory,
		DownstreamSettleTime:   o.DownstreamSettleTime,
		Reconcile:              o.Reconcile,
		Authorize:              firstHook(o.Authorize, b.Authorize),
		readUnfinished:         true, // ForEach reads every item's receipt before it runs any
	}, nil
}

// lookup reads, in one statement, the finished receipts among the items calls[run]: by ID
// within the batch's namespace, tenant and operation, on the receipts' unique index. It returns
// a *CompensatedError when the batch's own step has a completed compensation.
func (s *Store) lookup(ctx context.Context, batch keys.Key, operation string, calls []Call, run []int) (map[string]*receipt, error) {
	settled := make(map[string]*receipt)
	if len(run) == 0 {
		return settled, nil
	}
	ids := make([]string, len(run))
	for n, i := range run {
		ids[n] = calls[i].Key.ID
	}
	var compensated *CompensatedError
	err := s.query(ctx, s.sql.settings, s.sql.readItems, []any{batch.Namespace, batch.Tenant, operation, ids, string(batch.Token())}, func(rows pgx.Rows) error {
		var id *string
		r, err := scanReceipt(idRow{rows: rows, id: &id})
		switch {
		case err != nil:
		case id == nil:
			compensated = &CompensatedError{Key: batch, Token: batch.Token(), Compensation: r.compensatedBy, At: r.compensatedAt}
		default:
			settled[*id] = &r
		}
		return err
	})
	if err == nil && compensated != nil {
		return nil, compensated
	}
	return settled, err
}

// idRow scans a row whose first column is the receipt's ID, then the columns scanReceipt reads.
type idRow struct {
	rows pgx.Rows
	id   **string // NULL on the row of the batch's compensation
}

func (r idRow) Scan(dest ...any) error { return r.rows.Scan(append([]any{r.id}, dest...)...) }

// itemLeases are the leases of a batch's running items, which a heartbeat extends together with
// the lease of the activity's own receipt.
type itemLeases struct {
	parent *leaseHolder // nil for an activity that runs without a receipt
	mu     sync.Mutex
	live   map[*leaseHolder]struct{}
}

type itemLeasesKey struct{}

func itemLeasesFrom(ctx context.Context) *itemLeases {
	l, _ := ctx.Value(itemLeasesKey{}).(*itemLeases)
	return l
}

// hold registers an item's lease while its item runs; the returned function ends that.
func (b *itemLeases) hold(l *leaseHolder) (release func()) {
	b.mu.Lock()
	b.live[l] = struct{}{}
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.live, l)
		b.mu.Unlock()
	}
}

// heartbeat extends the activity's lease and every running item's (each at most once per third
// of its length; see leaseHolder.heartbeat).
func (b *itemLeases) heartbeat(ctx context.Context) {
	b.mu.Lock()
	holders := make([]*leaseHolder, 0, len(b.live)+1)
	for l := range b.live {
		holders = append(holders, l)
	}
	b.mu.Unlock()
	if b.parent != nil {
		holders = append(holders, b.parent)
	}
	for _, l := range holders {
		l.heartbeat(ctx)
	}
}

// BatchUnfinishedError reports that some items of a ForEach batch are not settled: they failed
// with a retryable error, or another attempt holds them. Return it from the activity: Temporal
// retries it, and the retry replays the settled items and runs the rest.
type BatchUnfinishedError struct {
	Key               keys.Key
	Unfinished, Total int
	// First is the ID of the first unfinished item, and Err its error.
	First string
	Err   error
}

func (e *BatchUnfinishedError) Error() string {
	return fmt.Sprintf("%s: %d of %d items unfinished (first: item %q: %v); the activity's retry runs them", ref(e.Key), e.Unfinished, e.Total, e.First, e.Err)
}

func (e *BatchUnfinishedError) Is(target error) bool { return target == ErrBatchUnfinished }

// Unwrap returns the first unfinished item's error.
func (e *BatchUnfinishedError) Unwrap() error { return e.Err }
