package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listeners holds, for each pool that has dispatchers running in this process, the one listener
// they share: one LISTEN connection, opened outside the pool, that fans the outbox's
// notifications out to the dispatchers of the schema they name (river's notifier is the model).
// A LISTEN connection taken from the pool would be held for as long as the dispatcher runs: four
// dispatchers on a pool of four connections held all of them, delivered nothing and starved
// every other query on the pool.
var listeners = struct {
	sync.Mutex
	byPool map[*pgxpool.Pool]*listener
}{byPool: map[*pgxpool.Pool]*listener{}}

// listener is one pool's LISTEN connection and its subscribers.
type listener struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned

	mu   sync.Mutex
	subs map[*subscription]struct{}
}

// subscription is one running dispatcher's: its schema, and the channel that wakes it.
type subscription struct {
	schema string
	wake   chan struct{}
}

// subscribe registers a dispatcher of schema on pool, starting the pool's listener if it is the
// first, and returns the channel that wakes it and the function that unregisters it (stopping
// the listener with the last one). It refuses a dispatcher that would make more dispatchers on
// pool than it has connections: each needs one, for its claims and marks, at the same time.
func subscribe(pool *pgxpool.Pool, schema string, log *slog.Logger) (<-chan struct{}, func(), error) {
	listeners.Lock()
	defer listeners.Unlock()
	l := listeners.byPool[pool]
	running := 0
	if l != nil {
		l.mu.Lock()
		running = len(l.subs)
		l.mu.Unlock()
	}
	if maxConns := pool.Config().MaxConns; int64(running+1) > int64(maxConns) {
		return nil, nil, fmt.Errorf("%d dispatchers would run on a pool of MaxConns %d: each takes a connection of the pool for its claims and marks, and the application's queries would wait behind them; raise the pool's MaxConns (pool_max_conns), or serve several topics from one dispatcher (DispatcherConfig.Topics)",
			running+1, maxConns)
	}
	if l == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l = &listener{pool: pool, log: log, cancel: cancel, done: make(chan struct{}), subs: map[*subscription]struct{}{}}
		listeners.byPool[pool] = l
		go l.run(ctx)
	}
	s := &subscription{schema: schema, wake: make(chan struct{}, 1)}
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	return s.wake, func() {
		listeners.Lock()
		defer listeners.Unlock()
		l.mu.Lock()
		delete(l.subs, s)
		last := len(l.subs) == 0
		l.mu.Unlock()
		if last {
			delete(listeners.byPool, pool)
			l.cancel()
			<-l.done
		}
	}, nil
}

// run listens until ctx ends. On any error it drops the connection and listens again after a
// pause; the dispatchers' polls cover the gap.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	for ctx.Err() == nil {
		err := l.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.Debug("listen ended; polling until it is back", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(ListenBackoffDefault/2 + rand.N(ListenBackoffDefault)):
		}
	}
}

func (l *listener) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{notifyChannel}.Sanitize()); err != nil {
		return err
	}
	// A message put while no connection was listening (before the first LISTEN, or between a
	// lost connection and this one) notified no one: one round of every dispatcher now finds
	// it, rather than the next poll.
	l.wake(func(string) bool { return true })
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.wake(func(schema string) bool { return schema == n.Payload })
	}
}

// wake signals the subscribers whose schema matches.
func (l *listener) wake(match func(schema string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs {
		if match(s.schema) {
			signal(s.wake)
		}
	}
}
