package outbox

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// wakeSetup is an outbox on a fresh schema whose PutOnce sends wake as its wake-up.
func wakeSetup(t *testing.T, wake string) (*Outbox, string) {
	t.Helper()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pgtest.Pool(t), name))
	o, err := New(pgtest.Pool(t), &Config{Schema: name})
	require.NoError(t, err)
	o.wake = wake
	return o, name
}

// PutOnce on a pool commits the record and the message first, and wakes the dispatchers in a
// transaction of its own after it, so that the wake-up's commit (which holds NOTIFY's lock, shared
// by the whole server) does not wait for the delivery's WAL flush. The test's wake-up is the
// real one that also names its transaction.
func TestPutOnceWakesInATransactionOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := wakeSetup(t, strings.Replace(wakeStatement, "pg_notify($1, $2)", "pg_notify($1, $2 || ' ' || txid_current() % 4294967296)", 1))
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "LISTEN "+notifyChannel)
	require.NoError(t, err)

	once, err := o.PutOnce(ctx, o.db, InboxRecord{Consumer: "webhook/test"}, Message{ID: "m", Topic: "t"})
	require.NoError(t, err)
	require.Equal(t, Once{Recorded: true}, once)
	var xmin int64
	require.NoError(t, o.db.QueryRow(ctx, "SELECT xmin::text::bigint FROM "+o.table+" WHERE id = 'm'").Scan(&xmin))

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(waitCtx)
		require.NoError(t, err, "no wake-up")
		schema, xid, ok := strings.Cut(n.Payload, " ")
		if !ok || schema != name {
			continue // another test's
		}
		require.NotEqual(t, strconv.FormatInt(xmin, 10), xid, "the wake-up was sent in the delivery's own transaction")
		return
	}
}

// A wake-up that fails after the delivery committed (as when the process dies between the two)
// does not fail PutOnce, whose record and message are stored; a dispatcher that no notification
// wakes delivers the message at its poll.
func TestPutOnceWithALostWakeUpIsDeliveredByThePoll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	o, _ := wakeSetup(t, "SELECT $1::text, $2::text, 1/0")

	var mu sync.Mutex
	delivered := map[string]int{}
	d, err := NewDispatcher(o, PublisherFunc(func(_ context.Context, dl Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		delivered[dl.ID]++
		return nil
	}), &DispatcherConfig{Logger: slog.New(slog.DiscardHandler), Poll: 20 * time.Millisecond, Maintenance: -1})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	once, err := o.PutOnce(ctx, o.db, InboxRecord{Consumer: "webhook/test"}, Message{ID: "lost wake-up", Topic: "t"})
	require.NoError(t, err, "a failed wake-up failed a delivery that was committed")
	require.Equal(t, Once{Recorded: true}, once)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return delivered["lost wake-up"] == 1
	}, 10*time.Second, 10*time.Millisecond, "the poll did not deliver a message whose wake-up was lost")
}

// On a connection inside a transaction the caller opened (BEGIN sent by hand), PutOnce is part
// of that transaction: it does not commit it to send its wake-up after, and a rollback undoes it.
// Both kinds of connection PutOnce tells apart: a *pgx.Conn and a pool's *pgxpool.Conn.
func TestPutOnceOnAConnectionInATransactionLeavesItToTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, _ := wakeSetup(t, wakeStatement)
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	pooled, err := o.db.Acquire(ctx)
	require.NoError(t, err)
	defer pooled.Release()
	for _, c := range []struct {
		name string
		db   interface {
			Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
			SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
		}
		conn *pgconn.PgConn
	}{
		{"Conn", conn, conn.PgConn()},
		{"PoolConn", pooled, pooled.Conn().PgConn()},
	} {
		_, err = c.db.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = o.PutOnce(ctx, c.db, InboxRecord{Consumer: "webhook/test"}, Message{ID: c.name, Topic: "t"})
		require.NoError(t, err, c.name)
		require.Equal(t, byte('T'), c.conn.TxStatus(), "%s: PutOnce ended the caller's transaction", c.name)
		_, err = c.db.Exec(ctx, "ROLLBACK")
		require.NoError(t, err)
	}
	var messages int
	require.NoError(t, o.db.QueryRow(ctx, "SELECT count(*) FROM "+o.table).Scan(&messages))
	require.Zero(t, messages, "the caller's rollback left a message")
}
