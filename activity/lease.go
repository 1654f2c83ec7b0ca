package activity

import (
	"context"
	"sync"
	"time"

	"github.com/tempotent/tempotent/keys"
)

type leaseKey struct{}

// leaseHolder is the running attempt's hold on its receipt. The interceptor's heartbeat hook
// extends the lease through it, and its presence in a context tells Wrap that the interceptor
// already applies a receipt, so the function is not wrapped twice.
type leaseHolder struct {
	store *Store
	key   keys.Key
	fence int64

	mu         sync.Mutex
	lastExtend time.Time
}

func withLease(ctx context.Context, l *leaseHolder) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

func leaseFrom(ctx context.Context) *leaseHolder {
	l, _ := ctx.Value(leaseKey{}).(*leaseHolder)
	return l
}

// heartbeat extends the lease by a fresh lease length (see Store.leaseFor), at most once per
// third of that length, so that frequent heartbeats stay cheap. A fenced-out attempt's extension
// touches no row.
func (l *leaseHolder) heartbeat(ctx context.Context) {
	lease := l.store.leaseFor(ctx, Call{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastExtend) < lease/3 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	k := l.key
	if _, err := l.store.db.Exec(wctx, l.store.sql.extend, k.Namespace, k.Tenant, k.Operation, k.ID, l.fence, lease.Microseconds()); err == nil {
		l.lastExtend = time.Now()
	}
}
