package activity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"

	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/keys"
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
	return o.Options.Validate()
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
// it, since every item's receipt says whether it is settled. Settled is how many items have a
// final outcome (ItemResult.Settled), Failed how many of those have a recorded error, Total how
// many items the call runs or replays: {Settled: 403, Failed: 3, Total: 1000} reads "400 done,
// 3 declined, 597 left".
type Progress = engine.Progress

// ForEach runs fn once per item of a batch activity (a payout to 1,000 payees, a mailing), each
// item under its own receipt: a key derived from the activity's key and the item's ID
// (keys.Key.Item), its own token for the downstream (keys.TokenFrom in fn's context), and the
// same state machine as Do — lease, fence, takeover, reconcile or OutcomeUnknownError, replay,
// payload mismatch. So a batch retried after a crash at item 600, or resumed from a heartbeat
// that is behind, pays nobody twice:
//
//   - its first statement reads the receipts of every item at once; settled items replay
//     without calling fn and without another round trip;
//   - the others run, each reserved, called and completed under its own receipt. With
//     Options.DownstreamDeduplicates their reservations are written ahead, a chunk of items per
//     statement, so that an item's own round trip is its completion; otherwise each is
//     reserved as it runs (2 round trips). Completions of items that run together
//     (Items.Concurrency) share commits, and an item whose earlier attempt may have had its
//     effect is taken over with the same token, or reconciled.
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
		return nil, engine.ToTemporal(fmt.Errorf("activity.ForEach: %w: %w", ErrMisconfigured, err))
	}
	b, err := s.eng.Batch(ctx, o.Operation, reflect.TypeFor[In](), reflect.TypeFor[Out]())
	if err != nil {
		return nil, engine.ToTemporal(err)
	}
	results := make([]ItemResult[Out], len(items))
	same := make([]int, len(items)) // the earlier item of the same ID, or -1
	for i, item := range items {
		results[i].ID = o.ID(item)
		same[i], results[i].Err = b.Add(results[i].ID, item, o.Options)
	}
	if err := b.Lookup(ctx); err != nil {
		return nil, engine.ToTemporal(err)
	}
	b.Run(ctx, o.Concurrency, func(ctx context.Context, i int) (settled, failed bool) {
		r := &results[i]
		p, called, err := b.Item(ctx, i, func(ctx context.Context) (*commonpb.Payload, error) {
			v, err := fn(ctx, items[i])
			if err != nil {
				return nil, err
			}
			return s.eng.Encode(b.ItemKey(i), v)
		})
		r.Out, r.Err = decode[Out](s, p, err)
		r.Replayed = !called && r.Err == nil
		r.final = r.Err != nil && s.eng.IsFinal(ctx, r.Err)
		return r.Settled(), r.final
	})

	unfinished := &BatchUnfinishedError{Key: b.Key(), Total: len(items)}
	for i := range results {
		if j := same[i]; j >= 0 && results[i].Err == nil {
			results[i] = results[j] // the same intent: what the first came to
			results[i].Replayed = true
		}
		results[i].Err = engine.ToTemporal(results[i].Err) // again for the items that did not run
		results[i].final = results[i].Err != nil && s.eng.IsFinal(ctx, results[i].Err)
		if !results[i].Settled() {
			unfinished.Unfinished++
			unfinished.First = cmp.Or(unfinished.First, results[i].ID)
			unfinished.Err = cmp.Or(unfinished.Err, results[i].Err)
		}
	}
	if unfinished.Unfinished > 0 {
		return results, engine.ToTemporal(unfinished)
	}
	return results, nil
}
