package outbox_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// onceSetup is an outbox on a fresh schema, on a pool of one connection whose round trips
// counter counts.
func onceSetup(t *testing.T, cfg outbox.Config) (*outbox.Outbox, *pgxpool.Pool, *pgtest.Counter, string) {
	t.Helper()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pgtest.Pool(t), name))
	counter := &pgtest.Counter{}
	pool := pgtest.CountingPool(t, counter)
	cfg.Schema = name
	o, err := outbox.New(pool, &cfg)
	require.NoError(t, err)
	return o, pool, counter, name
}

func onceRecord(payload string) outbox.InboxRecord {
	sum := sha256.Sum256([]byte(payload))
	return outbox.InboxRecord{Consumer: "webhook/test", Digest: sum[:]}
}

// onceRows counts the inbox records and outbox messages of schema.
func onceRows(t *testing.T, schema string) (records, messages int) {
	t.Helper()
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT (SELECT count(*) FROM "+schema+".inbox), (SELECT count(*) FROM "+schema+".outbox)").
		Scan(&records, &messages))
	return records, messages
}

// listen returns a connection LISTENing on the outbox's channel.
func listen(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), "LISTEN tempotent_outbox")
	require.NoError(t, err)
	return conn
}

// nextNotification is the payload of the next notification conn receives that is one of
// payloads (the other tests, in parallel, notify too).
func nextNotification(t *testing.T, conn *pgx.Conn, payloads ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		require.NoError(t, err)
		if slices.Contains(payloads, n.Payload) {
			return n.Payload
		}
	}
}

// PutOnce writes the record and the message, and notifies, in one round trip; a second call
// finds the record and writes nothing, in one round trip too.
func TestPutOnceRecordsAndPutsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, counter, name := onceSetup(t, outbox.Config{})
	l := listen(t)
	m := outbox.Message{ID: "m1", Topic: "t", Payload: []byte("body"), Headers: map[string]string{"H": "v"}}

	counter.Reset()
	once, err := o.PutOnce(ctx, pool, onceRecord("content"), m)
	require.NoError(t, err)
	require.Equal(t, outbox.Once{Recorded: true}, once)
	require.Equal(t, int64(1), counter.RoundTrips())
	require.Equal(t, name, nextNotification(t, l, name), "the put notified the dispatchers")
	records, messages := onceRows(t, name)
	require.Equal(t, [2]int{1, 1}, [2]int{records, messages})
	var consumer, id string
	var digest []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT consumer, message_id, digest FROM "+name+".inbox").Scan(&consumer, &id, &digest))
	require.Equal(t, []any{"webhook/test", "m1", onceRecord("content").Digest}, []any{consumer, id, digest})

	counter.Reset()
	once, err = o.PutOnce(ctx, pool, onceRecord("other content"), m)
	require.NoError(t, err)
	require.Equal(t, outbox.Once{Known: true, Stored: onceRecord("content").Digest}, once)
	require.Equal(t, int64(1), counter.RoundTrips())
	records, messages = onceRows(t, name)
	require.Equal(t, [2]int{1, 1}, [2]int{records, messages})

	// The lock_timeout the statement ran under is the transaction's only: the pool's one
	// connection has its own back.
	var timeout string
	require.NoError(t, pool.QueryRow(ctx, "SHOW lock_timeout").Scan(&timeout))
	require.Equal(t, "0", timeout)
}

// With NoNotify nothing is notified: the first notification the listener gets is one sent after
// the put.
func TestPutOnceNoNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, _, name := onceSetup(t, outbox.Config{NoNotify: true})
	l := listen(t)
	_, err := o.PutOnce(ctx, pool, onceRecord("content"), outbox.Message{ID: "m1", Topic: "t"})
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, "SELECT pg_notify('tempotent_outbox', $1)", name+" after")
	require.NoError(t, err)
	require.Equal(t, name+" after", nextNotification(t, l, name, name+" after"))
}

// A message under the ID with other content (its record purged before it) refuses the record:
// ErrMismatch, nothing written; the same content is recorded, and not put again; once the record
// is there, it is what PutOnce reports.
func TestPutOnceMessageAlreadyInTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, _, name := onceSetup(t, outbox.Config{})
	m := outbox.Message{ID: "m1", Topic: "t", Payload: []byte("body")}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Put(ctx, tx, m) }))

	other := m
	other.Payload = []byte("another body")
	_, err := o.PutOnce(ctx, pool, onceRecord("content"), other)
	require.ErrorIs(t, err, outbox.ErrMismatch)
	records, messages := onceRows(t, name)
	require.Equal(t, [2]int{0, 1}, [2]int{records, messages})

	once, err := o.PutOnce(ctx, pool, onceRecord("content"), m)
	require.NoError(t, err)
	require.Equal(t, outbox.Once{Recorded: true}, once)
	records, messages = onceRows(t, name)
	require.Equal(t, [2]int{1, 1}, [2]int{records, messages})

	once, err = o.PutOnce(ctx, pool, onceRecord("content"), other)
	require.NoError(t, err)
	require.Equal(t, outbox.Once{Known: true, Stored: onceRecord("content").Digest}, once)
}

// A message put under the ID by another writer, committed after the statement's snapshot, fails
// the statement: nothing is written (no record of a delivery whose message was not checked), and
// the next call sees the message.
func TestPutOnceRacingAnotherWriterWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, _, name := onceSetup(t, outbox.Config{})
	other, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, "INSERT INTO "+name+".outbox (id, topic, payload, digest) VALUES ('m1', 't', 'x', 'x')")
	require.NoError(t, err)

	var wg sync.WaitGroup
	var putErr error
	wg.Go(func() {
		_, putErr = o.PutOnce(ctx, pool, onceRecord("content"), outbox.Message{ID: "m1", Topic: "t"})
	})
	require.Eventually(t, func() bool {
		var waiting int
		err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%inbox%'", name).Scan(&waiting)
		return err == nil && waiting == 1
	}, 30*time.Second, time.Millisecond, "PutOnce does not wait on the other writer's message")
	require.NoError(t, other.Commit(ctx))
	wg.Wait()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(putErr, &pgErr), "%v", putErr)
	require.Equal(t, "23505", pgErr.Code)
	records, messages := onceRows(t, name)
	require.Equal(t, [2]int{0, 1}, [2]int{records, messages})

	_, err = o.PutOnce(ctx, pool, onceRecord("content"), outbox.Message{ID: "m1", Topic: "t"})
	require.ErrorIs(t, err, outbox.ErrMismatch)
}

// recordInFlight writes consumer webhook/test's record of id in schema name in a transaction
// that stays open, as a concurrent delivery's, until t ends, and returns a record of the same
// delivery that waits 20ms for it.
func recordInFlight(t *testing.T, name, id string) outbox.InboxRecord {
	t.Helper()
	ctx := context.Background()
	inFlight, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = inFlight.Rollback(ctx) })
	_, err = inFlight.Exec(ctx, "INSERT INTO "+name+".inbox (consumer, message_id) VALUES ('webhook/test', $1)", id)
	require.NoError(t, err)
	rec := onceRecord("content")
	rec.LockTimeout = 20 * time.Millisecond
	return rec
}

// requireLockNotAvailable fails t unless err is Postgres's lock_not_available.
func requireLockNotAvailable(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "55P03", pgErr.Code)
}

// A concurrent delivery's uncommitted record is waited for up to LockTimeout; then PutOnce
// fails with lock_not_available and writes nothing. In a caller's transaction, the
// transaction's own lock_timeout is what it has after PutOnce.
func TestPutOnceLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, _, name := onceSetup(t, outbox.Config{})
	rec := recordInFlight(t, name, "m1")
	_, err := o.PutOnce(ctx, pool, rec, outbox.Message{ID: "m1", Topic: "t"})
	requireLockNotAvailable(t, err)
	records, messages := onceRows(t, name)
	require.Equal(t, [2]int{0, 0}, [2]int{records, messages})

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '1234ms'"); err != nil {
			return err
		}
		once, err := o.PutOnce(ctx, tx, onceRecord("content"), outbox.Message{ID: "m2", Topic: "t"})
		require.NoError(t, err)
		require.True(t, once.Recorded)
		var timeout string
		require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&timeout))
		require.Equal(t, "1234ms", timeout)
		return nil
	}))
}

// A record needs its consumer: without one, PutOnce refuses before sending anything.
func TestPutOnceRefusesARecordWithoutConsumer(t *testing.T) {
	t.Parallel()
	o, pool, counter, _ := onceSetup(t, outbox.Config{})
	counter.Reset()
	_, err := o.PutOnce(context.Background(), pool, outbox.InboxRecord{}, outbox.Message{ID: "m1", Topic: "t"})
	require.ErrorIs(t, err, outbox.ErrInvalidMessage)
	require.ErrorContains(t, err, "InboxRecord.Consumer is empty")
	require.Zero(t, counter.RoundTrips())
}

// noticePool is a pool of one connection that sends every notice Postgres gives it to notices.
func noticePool(t *testing.T, notices chan<- string) *pgxpool.Pool {
	t.Helper()
	return configuredPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices <- n.Severity + ": " + n.Message }
	})
}

// PutOnce's two transactions are opened and committed as such: Postgres warns of nothing (a
// COMMIT with no BEGIN before it would give "there is no transaction in progress", a line in the
// server's log for every delivery), neither on a pool nor on a connection of the caller's.
func TestPutOnceGivesNoNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, _, _, _ := onceSetup(t, outbox.Config{})
	notices := make(chan string, 16)
	pool := noticePool(t, notices)
	pooled, err := pool.Acquire(ctx)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		db   interface {
			SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
		}
	}{
		{"PoolConn", pooled},
		{"Conn", pooled.Conn()},
	} {
		once, err := o.PutOnce(ctx, c.db, onceRecord("content"), outbox.Message{ID: c.name, Topic: "t"})
		require.NoError(t, err, c.name)
		require.True(t, once.Recorded, c.name)
	}
	pooled.Release()
	once, err := o.PutOnce(ctx, pool, onceRecord("content"), outbox.Message{ID: "Pool", Topic: "t"})
	require.NoError(t, err)
	require.True(t, once.Recorded)
	// A statement's notices arrive before its result, so all are in by now.
	close(notices)
	var got []string
	for n := range notices {
		got = append(got, n)
	}
	require.Empty(t, got)
}

// A delivery whose statement fails (here: it waits past its LockTimeout on a concurrent
// delivery's record) stores nothing and leaves the connection it ran on idle, out of any
// transaction, and reusable: on a pool, the pool keeps it (the same backend serves the next
// call) rather than closing it; on a caller's connection, the caller can go on with it.
func TestPutOnceFailingLeavesTheConnectionIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, _, _, name := onceSetup(t, outbox.Config{})
	rec := recordInFlight(t, name, "m1")
	pool := noticePool(t, make(chan string, 16))
	backend := func() uint32 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	before := backend()
	_, err := o.PutOnce(ctx, pool, rec, outbox.Message{ID: "m1", Topic: "t"})
	requireLockNotAvailable(t, err)
	require.Equal(t, before, backend(), "the pool closed the connection PutOnce failed on")

	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = o.PutOnce(ctx, conn, rec, outbox.Message{ID: "m1", Topic: "t"})
	requireLockNotAvailable(t, err)
	require.Equal(t, byte('I'), conn.PgConn().TxStatus(), "PutOnce left the connection in a transaction")
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))

	records, messages := onceRows(t, name)
	require.Equal(t, [2]int{0, 0}, [2]int{records, messages})
}
