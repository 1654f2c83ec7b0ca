// A batch's items reserved ahead of their turn, a chunk of items in one statement, instead of
// one reservation per item.

package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ahead reserves the items of a Batch ahead of their turn: when an item's turn comes and no
// chunk holds it yet, one statement (reserveBatch) reserves it and the items after it that are
// not settled, so that each item's own round trip is its completion alone.
//
// Only items whose downstream deduplicates are reserved ahead. A reservation is an effect that
// may have happened until its attempt completes or releases it: one that a crash leaves behind
// is taken over by the next attempt, which calls again with the same token — harmless exactly
// when the downstream deduplicates on it, as an asynchronous reservation already assumes
// (Store.reserveSettings). For any other downstream a crash would leave every item of the
// chunk an unknown outcome instead of the few running, so those items reserve one by one as
// they run. The authorization hook is asked for each item before its chunk's statement, so a
// refused item reserves nothing.
//
// A reservation is used only while its lease has more than two thirds left (the leeway a
// running item has between the extensions of its heartbeats); an item whose reservation waited
// longer releases it and reserves again. Chunks start at twice the concurrency and double while
// a chunk's items all start within a sixth of their lease, and halve when they do not, so that
// slow items are not reserved long before they run.
type ahead struct {
	next  int // position in Batch.run of the first item no chunk has offered yet
	size  int // how many items the next chunk offers
	pos   map[int]int
	items map[int]aheadItem // by item index: what its chunk did, until Batch.Item takes it
	// last is when the last chunk's statement was sent, and lease its items' lease.
	last  time.Time
	lease time.Duration
}

// aheadItem is what a chunk did for one item: the reservation it wrote or the receipt it found
// (held, nil when the statement failed or returned no row for it), or the authorization hook's
// refusal or failure.
type aheadItem struct {
	held    *held
	authErr error
}

// held is a reservation that the statement of an item's chunk wrote (receipt.inserted), or the
// receipt it found there instead.
type held struct {
	reservation reservation
	receipt     receipt
	sent        time.Time // when the statement was sent: the lease counts from before it
	lease       time.Duration
}

// fresh reports whether a reservation written ahead still has more than two thirds of its lease.
func (h *held) fresh() bool { return time.Since(h.sent) < h.lease/3 }

// takeAhead returns what a chunk did for item i, reserving the chunks up to the one that holds
// it first; false when no chunk offers it (a settled item, or one whose downstream does not
// deduplicate).
func (b *Batch) takeAhead(ctx context.Context, i int) (aheadItem, bool) {
	b.aheadMu.Lock()
	defer b.aheadMu.Unlock()
	a := &b.ahead
	if a.pos == nil {
		a.pos, a.items = make(map[int]int, len(b.run)), map[int]aheadItem{}
		for p, j := range b.run {
			a.pos[j] = p
		}
		a.size = 2 * max(b.concurrency, 1) // at least one item a chunk, or this loop would not end
	}
	for a.pos[i] >= a.next && a.next < len(b.run) {
		b.reserveChunk(ctx)
	}
	it, ok := a.items[i]
	delete(a.items, i)
	return it, ok
}

// reserveChunk offers the next chunk of items and reserves those of them that are not settled,
// whose downstream deduplicates and whose caller is authorized, in one statement.
func (b *Batch) reserveChunk(ctx context.Context) {
	s, a := b.store, &b.ahead
	if !a.last.IsZero() {
		if time.Since(a.last) < a.lease/6 {
			a.size = min(2*a.size, maxBatch)
		} else {
			a.size = max(a.size/2, b.concurrency, 1)
		}
	}
	var (
		reqs  []*reserveReq
		index []int
	)
	for a.next < len(b.run) && len(reqs) < a.size {
		i := b.run[a.next]
		a.next++
		c := b.calls[i]
		if b.settled[c.Key.ID] != nil || !c.DownstreamDeduplicates {
			continue
		}
		if err := s.authorize(ctx, c); err != nil {
			a.items[i] = aheadItem{authErr: err}
			continue
		}
		c.origin = originOf(ctx)
		reqs = append(reqs, &reserveReq{call: c, reservation: newReservation(), lease: s.leaseFor(ctx, c)})
		index = append(index, i)
	}
	if len(reqs) == 0 {
		return
	}
	a.last, a.lease = time.Now(), reqs[0].lease
	got := make([]bool, len(reqs))
	qctx, cancel := s.statementContext(ctx)
	defer cancel()
	err := s.query(qctx, s.reserveSettings(reqs[0].call), s.sql.reserveBatch, s.reserveBatchArgs(reqs), func(rows pgx.Rows) error {
		var n int64
		r, err := scanReceipt(numberedRow{rows, &n})
		if err == nil && n >= 1 && n <= int64(len(reqs)) {
			reqs[n-1].receipt, got[n-1] = r, true
		}
		return err
	})
	for n, i := range index {
		var it aheadItem
		if err == nil && got[n] {
			r := reqs[n]
			it.held = &held{reservation: r.reservation, receipt: r.receipt, sent: a.last, lease: r.lease}
		}
		a.items[i] = it // without held, the item reserves on its own (Do), as when the statement fails
	}
}

// releaseAhead releases the reservations written ahead for items that never ran (Run stopped
// early on a panic), recording that nothing was called under them.
func (b *Batch) releaseAhead(ctx context.Context) {
	b.aheadMu.Lock()
	defer b.aheadMu.Unlock()
	for i, it := range b.ahead.items {
		if it.held != nil && it.held.receipt.inserted {
			b.releaseHeld(ctx, i, it.held)
		}
		delete(b.ahead.items, i)
	}
}

// releaseHeld releases item i's reservation written ahead, which nothing was called under.
func (b *Batch) releaseHeld(ctx context.Context, i int, h *held) {
	s := b.store
	_ = s.writeOn(ctx, func(wctx context.Context) error {
		_, err := s.release(wctx, &attempt{call: b.calls[i], reservation: h.reservation}, false, 0)
		return err // an item left held is taken over, with the same token, once its lease ends
	})
}
