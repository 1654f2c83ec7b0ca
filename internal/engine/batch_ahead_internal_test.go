package engine

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/keys"
)

// aheadBatch runs n items (IDs item-0 … item-n-1) under a batch's own receipt, concurrency at
// once, each calling call(b, i) and recording "ok"; before runs inside the batch's function
// before Run.
type aheadBatch struct {
	s           *Store
	n           int
	dedup       bool
	concurrency int
	call        func(ctx context.Context, b *Batch, i int)
	before      func(b *Batch)

	mu       sync.Mutex
	calls    map[int]int
	errs     map[int]error // the items' errors, when wantErrs; else an error fails the test
	wantErrs bool
}

func (a *aheadBatch) run(t *testing.T, ctx context.Context, batchID string) {
	t.Helper()
	a.calls, a.errs = map[int]int{}, map[int]error{}
	c := Call{Key: keys.Key{Namespace: "ahead", Operation: "PayOut", ID: batchID}, Request: batchID,
		DownstreamDeduplicates: true, DownstreamKeyMemory: math.MaxInt64}
	_, err := doTyped(ctx, a.s, c, func(ctx context.Context) (int, error) {
		b, err := a.s.Batch(ctx, "Pay", reflect.TypeFor[string](), reflect.TypeFor[string]())
		require.NoError(t, err)
		for i := range a.n {
			_, err := b.Add(fmt.Sprint("item-", i), fmt.Sprint("item-", i), Options{DownstreamDeduplicates: a.dedup})
			require.NoError(t, err)
		}
		require.NoError(t, b.Lookup(ctx))
		if a.before != nil {
			a.before(b)
		}
		b.Run(ctx, a.concurrency, func(ctx context.Context, i int) (bool, bool) {
			_, _, err := b.Item(ctx, i, func(ctx context.Context) (*commonpb.Payload, error) {
				a.mu.Lock()
				a.calls[i]++
				a.mu.Unlock()
				if a.call != nil {
					a.call(ctx, b, i)
				}
				return a.s.Encode(b.ItemKey(i), "ok")
			})
			if !a.wantErrs {
				require.NoError(t, err, "item %d", i)
			}
			a.mu.Lock()
			a.errs[i] = err
			a.mu.Unlock()
			return err == nil, false
		})
		return 0, nil
	})
	require.NoError(t, err)
}

// A batch's items whose downstream deduplicates are reserved in chunks of one statement,
// growing from twice the concurrency; those of a downstream that does not are reserved one by
// one as they run, so that a crash leaves only the running items with an unknown outcome.
func TestForEachReservesItemsInChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, dedup := range []bool{true, false} {
		s := reserveStore(t, Config{})
		rec := &recordingBatcher{inner: s.db, sql: s.sql}
		s.receipts = rec
		a := &aheadBatch{s: s, n: 40, dedup: dedup, concurrency: 1}
		a.run(t, ctx, "chunks")
		rec.mu.Lock()
		sizes := rec.sizes[1:] // the first is the batch's own reservation
		rec.mu.Unlock()
		if dedup {
			require.Equal(t, []int{2, 4, 8, 16, 10}, sizes, "the chunks' reservations")
		} else {
			require.Len(t, sizes, 40, "a downstream that does not deduplicate had its items reserved ahead")
		}
		for i := range a.n {
			require.Equal(t, 1, a.calls[i], "item %d", i)
		}
	}
}

// An item whose reservation waited past a third of its lease does not call under it: another
// attempt may have taken the item over meanwhile (here one did, and finished it), and the two
// would call at once. It reserves again, and replays what the other attempt recorded.
func TestForEachItemReservedLongAgoReservesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{})
	a := &aheadBatch{s: s, n: 2, dedup: true, concurrency: 1}
	a.call = func(_ context.Context, b *Batch, i int) {
		if i != 0 {
			return
		}
		b.aheadMu.Lock()
		h := b.ahead.items[1].held
		b.aheadMu.Unlock()
		require.NotNil(t, h)
		require.True(t, h.receipt.inserted)
		h.sent = time.Now().Add(-h.lease) // its lease has ended…
		k := b.ItemKey(1)
		_, err := s.db.Exec(ctx, "UPDATE "+s.table()+" SET lease_expires_at = now() WHERE id = $1", k.ID)
		require.NoError(t, err)
		// …and another attempt took the item over and finished it.
		_, err = doTyped(context.Background(), s, b.calls[1], func(context.Context) (string, error) {
			a.calls[1]++
			return "ok", nil
		})
		require.NoError(t, err)
	}
	a.run(t, ctx, "stale")
	require.Equal(t, 1, a.calls[1], "the item was called under a reservation whose lease had ended")
}

// Items reserved ahead that never ran (Run stopped on a panic) are released, saying that
// nothing was called under them, not left held as effects that may have happened.
func TestForEachReleasesItemsReservedAheadThatNeverRan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{})
	var itemID string
	a := &aheadBatch{s: s, n: 4, dedup: true, concurrency: 1}
	a.call = func(_ context.Context, b *Batch, i int) {
		itemID = b.ItemKey(1).ID
		panic("item 0 panicked")
	}
	require.PanicsWithValue(t, "item 0 panicked", func() { a.run(t, ctx, "panic") })
	var held, effectPossible bool
	require.NoError(t, s.db.QueryRow(ctx, "SELECT lease_expires_at > now(), effect_possible FROM "+s.table()+" WHERE id = $1", itemID).
		Scan(&held, &effectPossible))
	require.False(t, held, "an item reserved ahead that never ran still holds its lease")
	require.False(t, effectPossible, "an item reserved ahead that never ran says an effect may have happened")
}

// An item reserved ahead whose turn comes after the activity's context ended calls nothing, and
// releases its reservation saying so, as an item reserved in its turn would.
func TestForEachItemReservedAheadAfterCancelCallsNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	s := reserveStore(t, Config{})
	var itemID string
	a := &aheadBatch{s: s, n: 2, dedup: true, concurrency: 1, wantErrs: true}
	a.call = func(_ context.Context, b *Batch, i int) {
		itemID = b.ItemKey(1).ID
		cancel()
	}
	a.run(t, ctx, "cancelled")
	require.Zero(t, a.calls[1], "an item reserved ahead was called after the context ended")
	require.ErrorIs(t, a.errs[1], context.Canceled)
	var held, effectPossible bool
	require.NoError(t, s.db.QueryRow(context.Background(), "SELECT lease_expires_at > now(), effect_possible FROM "+s.table()+" WHERE id = $1", itemID).
		Scan(&held, &effectPossible))
	require.False(t, held, "the item's reservation still holds its lease")
	require.False(t, effectPossible, "the item's reservation says an effect may have happened")
}
