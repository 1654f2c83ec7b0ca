package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempotent/tempotent/keys"
)

type leaseKey struct{}

// leaseHolder is the running attempt's hold on its receipt. The interceptor's heartbeat hook
// extends the lease through it, and its presence in a context tells Wrap that the interceptor
// already applies a receipt, so the function is not wrapped twice.
type leaseHolder struct {
	store       *Store
	key         keys.Key
	reservation reservation
	// cancel ends the attempt's context when an extension finds that the attempt no longer
	// holds the receipt.
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	lastExtend time.Time
	// ends is when the lease ends as this process reckons it (Unix nanoseconds, counted from
	// before the statement that set it): a locked completion retries until then (completeOne).
	ends atomic.Int64
}

// endsAt is when the attempt's lease ends, as this process reckons it.
func (l *leaseHolder) endsAt() time.Time { return time.Unix(0, l.ends.Load()) }

func withLease(ctx context.Context, l *leaseHolder) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

func leaseFrom(ctx context.Context) *leaseHolder {
	l, _ := ctx.Value(leaseKey{}).(*leaseHolder)
	return l
}

// heartbeat extends the lease by a fresh lease length (see Store.leaseFor), at most once per
// third of that length, so that frequent heartbeats stay cheap. When the extension touches no
// row, another attempt has taken the receipt over (this one was paused past its lease, or timed
// out while running): the attempt's context is cancelled with a FencedOutError as its cause, so
// that it stops calling the downstream beside the attempt that now holds the key.
func (l *leaseHolder) heartbeat(ctx context.Context) {
	lease := l.store.leaseFor(ctx, Call{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastExtend) < lease/3 {
		return
	}
	if l.extend(ctx, lease) == nil {
		l.lastExtend = time.Now()
	}
}

// extend moves the lease to lease from now. When it touches no row, the attempt no longer holds
// the receipt, and its context is cancelled; so it is when the shard refuses the tenant as moved
// away (SQLSTATE TT001: the move sealed its fence, and the attempt's completion would be refused
// too), with that error as the cause. Any other error leaves the lease as it was.
func (l *leaseHolder) extend(ctx context.Context, lease time.Duration) error {
	wctx, cancel := l.store.writeContext(ctx)
	defer cancel()
	k := l.key
	sent := time.Now()
	tag, err := l.store.exec(wctx, l.store.sql.extend, k.Namespace, k.Tenant, k.Operation, k.ID, l.reservation.uuid(), lease.Microseconds())
	if err == nil && tag.RowsAffected() == 0 {
		err = &FencedOutError{Key: k}
		l.cancel(err)
	}
	if isTenantMoved(err) { // the shard sealed the tenant's fence: no write of this attempt's will be taken
		l.cancel(err)
	}
	if err == nil {
		l.ends.Store(sent.Add(lease).UnixNano())
	}
	return err
}
