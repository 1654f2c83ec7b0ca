package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/tempotent/tempotent/internal/failpoint"
)

// held is a batch claimed and published whose results are not marked yet, and the end of its
// claim's lease by the dispatcher's clock: its marks must be sent before then.
type held struct {
	batch    []*claimed
	leaseEnd time.Time
}

// Drain dispatches batch after batch until one comes back short, or ctx ends, and returns how
// many messages it claimed. Run calls it whenever it wakes; call it yourself to dispatch from a
// job of your own, as you would DispatchOnce in a loop.
//
// Each batch's marks are sent together with the claim of the next batch, in one round trip and
// one transaction: one commit per batch, where DispatchOnce takes two (its claim's and its
// marks'). Nothing is weakened by it: the marks are fenced on the claim as DispatchOnce's are
// (see Dispatcher), they must still reach the database before their claim's lease ends (the round
// trip is bounded by it), and the claim, measured from just before that round trip, sees what
// they changed, so that a key's next message is claimed only after its predecessor's mark. The
// last batch, short or in hand when ctx ends, is marked on its own, and so is a batch whose round
// trip failed, and one in hand while pruning is behind (before the prune).
//
// When ctx ends, Drain claims nothing more and ends as DispatchOnce does: the publishes in flight
// get ShutdownGrace, their results are marked, the rest is handed back, and it returns a nil
// error.
func (d *Dispatcher) Drain(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	total := 0
	var prev *held
	for ctx.Err() == nil {
		n, next, err := d.round(ctx, prev)
		total += n
		if err != nil {
			// The round trip that carried prev's marks failed (a lost connection, a claim that
			// could not finish): prev's results are marked on their own while its lease lasts,
			// rather than redelivered after it. Should the failed transaction have committed
			// after all, the fence makes these marks match nothing.
			if prev != nil {
				err = errors.Join(err, d.markHeld(ctx, prev))
			}
			return total, err
		}
		prev = next
		if n < d.cfg.Batch {
			break
		}
		if d.behind.Load() {
			// The prune's time must not come out of the lease of the batch in hand: it is
			// marked first, on its own.
			if err := d.markHeld(ctx, prev); err != nil {
				return total, err
			}
			prev = nil
			d.pruneOnce(ctx)
		}
	}
	if prev == nil {
		return total, nil
	}
	return total, d.markHeld(ctx, prev)
}

// round claims one batch, with the marks of prev when it is not nil (see claim), and publishes
// what of the batch the claim's lease can cover. It returns how many messages it claimed and the
// batch, unmarked, or nil when it claimed none.
func (d *Dispatcher) round(ctx context.Context, prev *held) (int, *held, error) {
	// A claim cut off by the shutdown could commit without its reply reaching us: its messages
	// would stay held until the lease ends, an attempt counted. It runs under the grace instead,
	// and what it took is handed back.
	graceCtx, release := d.graceAfter(ctx)
	defer release()
	claimCtx := graceCtx
	if prev != nil {
		// The round trip carries prev's marks, which go out even when ctx ends (see markHeld),
		// and must arrive before prev's lease ends.
		c, cancel := context.WithDeadline(context.WithoutCancel(ctx), prev.leaseEnd)
		defer cancel()
		claimCtx = c
	}
	// Taken before the claim is sent: the database's lease starts later, at the claim's
	// now(), so one measured from here ends first, whatever the round trip's latency.
	claimedAt := time.Now()
	batch, err := d.claim(claimCtx, prev)
	if err != nil || len(batch) == 0 {
		return 0, nil, err
	}
	leaseEnd := claimedAt.Add(d.cfg.Lease)
	d.publish(ctx, graceCtx, leaseEnd, batch)
	failpoint.Hit(failpoint.AfterPublish)
	return len(batch), &held{batch: batch, leaseEnd: leaseEnd}, nil
}

// markHeld marks h on its own. Marks go out even when ctx has ended: a delivered message left
// unmarked is delivered again, and an untried one stays claimed until its lease ends. They are
// bounded by the lease: past it, another dispatcher may hold the messages, and the fence would
// refuse them.
func (d *Dispatcher) markHeld(ctx context.Context, h *held) error {
	markCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), h.leaseEnd)
	defer cancel()
	return d.mark(markCtx, h.batch)
}
