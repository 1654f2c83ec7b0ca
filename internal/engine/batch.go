package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// Batch is one ForEach pass over a batch's items, each under a receipt of its own: ForEach adds
// the items (Add), reads their settled receipts in one statement (Lookup), and runs the others
// (Run, Item). It is not safe for concurrent use, except Item inside Run.
type Batch struct {
	store *Store
	call  batchCall
	calls []Call
	// first is the index of the first item of each ID that runs; run lists those indexes.
	first   map[string]int
	run     []int
	settled map[string]*receipt
	// concurrency is Run's; ahead reserves the items that run in chunks (batch_ahead.go).
	concurrency int
	aheadMu     sync.Mutex
	ahead       ahead
}

// Batch starts the pass named operation (Items.Operation) of the batch the activity in ctx runs,
// over items of type in with results of type out. It fails when ctx runs no batch that can be
// retried safely, or when the pass's name ran in this attempt with other types.
func (s *Store) Batch(ctx context.Context, operation string, in, out reflect.Type) (*Batch, error) {
	call, err := s.batchCall(ctx, operation)
	if err != nil {
		return nil, err
	}
	if err := call.passes.claim(operation, in, out); err != nil {
		return nil, fmt.Errorf("activity.ForEach: %w: %s: %w", ErrMisconfigured, ref(call.Key), err)
	}
	return &Batch{store: s, call: call, first: map[string]int{}}, nil
}

// Key is the key of the batch's own receipt, which its items' keys derive from.
func (b *Batch) Key() keys.Key { return b.call.Key }

// Add adds the next item, whose ID is id and whose request is item, and returns the index of
// the earlier item with the same ID that it is the same intent as (-1 when it is the first), or
// the error that keeps it from running: an invalid key, no fingerprint, or another request
// under an ID already added (a *MismatchError).
func (b *Batch) Add(id string, item any, o Options) (same int, err error) {
	i := len(b.calls)
	c, err := b.call.item(id, item, o)
	if err == nil {
		err = b.store.check(&c)
	}
	b.calls = append(b.calls, c)
	switch j, seen := b.first[id]; {
	case err != nil:
		return -1, err
	case seen && !c.Fingerprint.Matches(b.calls[j].Fingerprint):
		return -1, &MismatchError{Key: c.Key, Stored: b.calls[j].Fingerprint, Actual: c.Fingerprint}
	case seen:
		return j, nil
	}
	b.first[id] = i
	b.run = append(b.run, i)
	return -1, nil
}

// Lookup reads the finished receipts of every item that runs, in one statement. It fails with a
// *CompensatedError when the batch's own step has a completed compensation, or a *StoreError.
func (b *Batch) Lookup(ctx context.Context) error {
	s, k := b.store, b.call.Key
	settled, err := s.lookup(ctx, k, b.call.operation, b.calls, b.run)
	var compensated *CompensatedError
	switch {
	case errors.As(err, &compensated):
		newObserver(ctx, s, k).log("refused: the step was compensated", "compensation", compensated.Compensation)
		return err
	case err != nil:
		return &StoreError{Op: "read items", Key: k, Err: err}
	}
	if len(settled) > 0 {
		newObserver(ctx, s, k).log("batch resumed: its settled items replay", "settled", len(settled), "items", len(b.run))
	}
	b.settled = settled
	return nil
}

// Run calls each for the first item of every ID that was added without an error, at most
// concurrency at once (zero means 1, in the order added), in a context where a heartbeat extends
// the lease of every item running. each reports whether its item is settled, and whether it
// failed for good; in an activity, Run heartbeats the Progress after each item.
func (b *Batch) Run(ctx context.Context, concurrency int, each func(ctx context.Context, i int) (settled, failed bool)) {
	live := &itemLeases{parent: leaseFrom(ctx), live: make(map[*leaseHolder]struct{})}
	ctx = context.WithValue(ctx, itemLeasesKey{}, live)
	var (
		mu       sync.Mutex
		progress = Progress{Total: len(b.run)}
	)
	b.concurrency = cmp.Or(max(concurrency, 0), 1)
	defer b.releaseAhead(ctx)
	parallel(b.run, b.concurrency, func(i int) {
		settled, failed := each(ctx, i)
		mu.Lock()
		if settled {
			progress.Settled++
		}
		if failed {
			progress.Failed++
		}
		now := progress
		mu.Unlock()
		if sdkactivity.IsActivity(ctx) {
			sdkactivity.RecordHeartbeat(ctx, now)
		}
	})
}

// Item runs item i inside Run: it replays the item's settled receipt, or runs fn under the
// item's own receipt through the state machine of Do. It reports whether fn was called.
func (b *Batch) Item(ctx context.Context, i int, fn PayloadFunc) (p *commonpb.Payload, called bool, err error) {
	s, c := b.store, b.calls[i]
	if r := b.settled[c.Key.ID]; r != nil {
		// A settled item replays here, not through Do, so it is authorized here.
		if err := s.authorize(ctx, c); err != nil {
			return nil, false, err
		}
		obs := newObserver(ctx, s, c.Key)
		if err := s.checkFingerprint(&c, *r, obs); err != nil {
			return nil, false, err
		}
		obs.count(telemetry.ReceiptReplayed)
		p, err := s.replay(c.Key, *r)
		return p, false, err
	}
	if it, ok := b.takeAhead(ctx, i); ok {
		if it.authErr != nil {
			return nil, false, it.authErr
		}
		c.authorized = true
		if h := it.held; h != nil && h.receipt.inserted && (!h.fresh() || ctx.Err() != nil) {
			b.releaseHeld(ctx, i, h) // it waited too long for its turn: reserve it again
			it.held = nil
		}
		c.held = it.held
	}
	p, err = s.Do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
		called = true
		return fn(ctx)
	})
	return p, called, err
}

// ItemKey is the key of item i's receipt.
func (b *Batch) ItemKey(i int) keys.Key { return b.calls[i].Key }
