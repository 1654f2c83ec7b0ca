package activity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// Items says how ForEach runs the items of a batch.
type Items[In any] struct {
	// ID returns an item's own ID, which names it across attempts: a payee's or a recipient's
	// ID, never its position in a list that a retry may build differently. Required. Two
	// items with one ID are one intent: the second replays the first, or, with another
	// request, is a payload mismatch.
	ID func(In) string
	// Operation names the pass: what is done to each item ("Transfer", "Notify"), as the items'
	// receipts record it. Required. An item's key is made of the batch's key, this name and the
	// item's ID, and nothing else: ForEach tells passes apart by their names alone. So two passes
	// over the same items in one activity (pay each seller, then notify each) must have
	// different names (another activity's passes may reuse them: its items' keys derive from its
	// own key); under one name the second pass finds the first's receipts and returns their
	// results as its own, calling nothing. ForEach called again under the same name in the
	// same attempt is the same pass, by that naming (a loop that retries the unfinished items):
	// its settled items replay. A name that ran in the attempt with other item or result types
	// is refused, as two passes under one name; ForEach cannot tell two passes of the same types
	// apart, and does not guess (comparing functions would not do: two closures of one literal
	// share their code).
	//
	// The name must be a valid key operation (1 to keys.MaxNameLen bytes of UTF-8 without
	// control characters). It may be the activity's own operation (its type), which is what an
	// empty Operation meant before it was required: naming the pass so keeps the item receipts of
	// batches in flight across that upgrade.
	Operation string
	// Concurrency is how many items run at once; zero means 1, in the order given. Items that
	// run together share their completions' commits.
	Concurrency int
	// Options are the downstream's properties for every item, as for Register.
	Options
}

// validate reports the first field of o that ForEach cannot run with.
func (o Items[In]) validate() error {
	switch {
	case o.ID == nil:
		return errors.New("Items.ID is required; return each item's own stable ID (a payee's ID, not its index)")
	case o.Operation == "":
		return errors.New(`Items.Operation is required; name the pass, what it does to each item ("Transfer", "Notify"), and give each pass over the same items its own name`)
	}
	// The name is the items' key operation. The activity's own operation is a valid one: an
	// item's ID is "item:<batch token>/<item ID>" (keys.Key.Item), and the batch's own receipt,
	// under that operation, has a key ID of another scope tag ("wf:", "explicit:"…), so no item
	// key equals it, nor an item key of another batch, whose token differs.
	if err := (keys.Key{Namespace: "-", Operation: o.Operation, ID: "-"}).Validate(); err != nil {
		return fmt.Errorf("Items.Operation %q is the items' key operation: %w", o.Operation, err)
	}
	return o.Options.validate()
}

// ItemResult is what one item of a batch came to.
type ItemResult[Out any] struct {
	// ID is the item's ID (Items.ID).
	ID string
	// Out is the item's result: the function's, or the one recorded by an earlier attempt.
	Out Out
	// Err is the item's error: a non-retryable one is recorded (a declined payment) and comes
	// back on every attempt; a retryable one (InProgressError, StoreError, a failed call)
	// leaves the item to the batch's next attempt.
	Err error
	// Replayed is true when the item's outcome was recorded by an earlier attempt and the
	// function was not called.
	Replayed bool

	final bool // Err is recorded: non-retryable, or of a type the retry policy does not retry
}

// Settled reports whether the item has a final outcome: a result, or an error its receipt
// records (a non-retryable one, or one whose type the activity's retry policy does not retry).
func (r ItemResult[Out]) Settled() bool { return r.Err == nil || r.final }

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

// ForEach runs fn once per item of a batch activity (a payout to 1,000 payees, a mailing), each
// item under its own receipt: a key derived from the activity's key and the item's ID
// (keys.Key.Item), its own token for the downstream (keys.TokenFrom in fn's context), and the
// same state machine as Do — lease, fence, takeover, reconcile or OutcomeUnknownError, replay,
// payload mismatch. So a batch retried after a crash at item 600, or resumed from a heartbeat
// that is behind, pays nobody twice:
//
//   - its first statement reads the receipts of every item at once; settled items replay
//     without calling fn and without another round trip;
//   - the others run: 2 round trips each (reserve, complete), completions of items that run
//     together (Items.Concurrency) sharing commits, and an item whose earlier attempt may have
//     had its effect is taken over with the same token, or reconciled.
//
// It returns one result per item, in the order given, and a *BatchUnfinishedError
// when some item is not settled (a retryable error of type ErrTypeBatchUnfinished, which is how
// a workflow sees it): return that error from the activity, and Temporal's retry runs the rest. An item's non-retryable error (a decline, a payload
// mismatch) is that item's alone; the others go on.
//
// ForEach runs inside an activity that has a key: a plain activity on a worker with the
// interceptor (NewInterceptor), or one registered with Register or RegisterTx and Options.Batch
// (without Batch, a retry after a crash would find the batch's own receipt holding an unknown
// outcome). A registered batch's own receipt fingerprints its whole input, so another input
// under the same key is refused as a payload mismatch before any item runs: an item added to a
// finished payout is not silently left unpaid by a replay. Each pass over the items is named by
// Items.Operation, which is required: two passes over the same items in one activity (pay, then
// notify) need two names.
//
// In an activity it heartbeats after each item with Progress as details; a heartbeat, its own
// or fn's, extends the lease of the activity's receipt and of every item running.
func ForEach[In, Out any](ctx context.Context, s *Store, items []In, o Items[In], fn func(context.Context, In) (Out, error)) ([]ItemResult[Out], error) {
	if err := o.validate(); err != nil {
		return nil, toTemporal(fmt.Errorf("activity.ForEach: %w: %w", ErrMisconfigured, err))
	}
	batch, err := s.batchCall(ctx, o.Operation)
	if err != nil {
		return nil, toTemporal(err)
	}
	if err := batch.passes.claim(o.Operation, reflect.TypeFor[In](), reflect.TypeFor[Out]()); err != nil {
		return nil, toTemporal(fmt.Errorf("activity.ForEach: %w: %s: %w", ErrMisconfigured, ref(batch.Key), err))
	}

	results := make([]ItemResult[Out], len(items))
	calls := make([]Call, len(items))
	first := make(map[string]int, len(items)) // item ID → index of its first item
	var run []int                             // first items to look up and run
	for i, item := range items {
		id := o.ID(item)
		results[i].ID = id
		c, err := batch.item(id, item, o.Options)
		calls[i] = c
		if err == nil {
			err = s.check(&calls[i])
		}
		switch j, seen := first[id]; {
		case err != nil:
			results[i].Err = err
		case seen && !calls[i].Fingerprint.Matches(calls[j].Fingerprint):
			results[i].Err = &MismatchError{Key: calls[i].Key, Stored: calls[j].Fingerprint, Actual: calls[i].Fingerprint}
		case !seen:
			first[id] = i
			run = append(run, i)
		}
	}

	settled, err := s.lookup(ctx, batch.Key, batch.operation, calls, run)
	var compensated *CompensatedError
	switch {
	case errors.As(err, &compensated):
		newObserver(ctx, s, batch.Key).log("refused: the step was compensated", "compensation", compensated.Compensation)
		return nil, toTemporal(err)
	case err != nil:
		return nil, toTemporal(&StoreError{Op: "read items", Key: batch.Key, Err: err})
	}
	if len(settled) > 0 {
		newObserver(ctx, s, batch.Key).log("batch resumed: its settled items replay", "settled", len(settled), "items", len(run))
	}

	live := &itemLeases{parent: leaseFrom(ctx), live: make(map[*leaseHolder]struct{})}
	ctx = context.WithValue(ctx, itemLeasesKey{}, live)
	var (
		mu       sync.Mutex
		progress = Progress{Total: len(run)}
	)
	each := func(i int) {
		r := &results[i]
		r.Out, r.Replayed, r.Err = runItem(ctx, s, calls[i], settled[calls[i].Key.ID], items[i], fn)
		r.Err = toTemporal(r.Err)
		r.final = r.Err != nil && s.isFinal(ctx, r.Err)
		mu.Lock()
		if r.Settled() {
			progress.Settled++
		}
		if r.final {
			progress.Failed++
		}
		now := progress
		mu.Unlock()
		if sdkactivity.IsActivity(ctx) {
			sdkactivity.RecordHeartbeat(ctx, now)
		}
	}
	parallel(run, cmp.Or(max(o.Concurrency, 0), 1), each)

	unfinished := &BatchUnfinishedError{Key: batch.Key, Total: len(items)}
	for i := range results {
		if j, ok := first[results[i].ID]; ok && j != i && results[i].Err == nil {
			results[i] = results[j] // the same intent: what the first came to
			results[i].Replayed = true
		}
		results[i].Err = toTemporal(results[i].Err) // again for the items that did not run
		results[i].final = results[i].Err != nil && s.isFinal(ctx, results[i].Err)
		if !results[i].Settled() {
			unfinished.Unfinished++
			unfinished.First = cmp.Or(unfinished.First, results[i].ID)
			unfinished.Err = cmp.Or(unfinished.Err, results[i].Err)
		}
	}
	if unfinished.Unfinished > 0 {
		return results, toTemporal(unfinished)
	}
	return results, nil
}

// runItem replays the item's settled receipt, or runs it through the state machine.
func runItem[In, Out any](ctx context.Context, s *Store, c Call, r *receipt, item In, fn func(context.Context, In) (Out, error)) (Out, bool, error) {
	var (
		out    Out
		called bool
		p      *commonpb.Payload
		err    error
	)
	if r != nil {
		obs := newObserver(ctx, s, c.Key)
		if err := s.checkFingerprint(c, *r, obs); err != nil {
			return out, false, err
		}
		obs.count(telemetry.ReceiptReplayed)
		p, err = s.replay(c.Key, *r)
	} else {
		p, err = s.do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
			called = true
			v, err := fn(ctx, item)
			if err != nil {
				return nil, err
			}
			return s.encode(c.Key, v)
		})
	}
	out, err = decode[Out](s, p, err)
	return out, !called && err == nil, err
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
		if !c.DownstreamDeduplicates || c.keyMemory() < s.cfg.Retention {
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
