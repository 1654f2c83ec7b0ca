package outbox

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/schema"
)

// InboxRecord is the record, in the schema's inbox table, that PutOnce writes with its message:
// Consumer's record of the message's ID (an inbox.Inbox with that inbox.Config.Consumer reads
// and purges it), holding Digest, the SHA-256 of what the consumer compares a redelivery with
// (nil for nothing), as inbox.Inbox.Claim stores it.
type InboxRecord struct {
	Consumer string
	Digest   []byte
	// LockTimeout bounds how long PutOnce waits for a concurrent delivery's uncommitted record
	// of the same ID; past it PutOnce fails and writes nothing. Default 2s, as the inbox's
	// (inbox.LockTimeoutDefault).
	LockTimeout time.Duration
}

// Once is what PutOnce found: either the record was new (Recorded), or it was there already
// (Known, with the digest it holds in Stored, nil when it holds none) and nothing was written.
type Once struct {
	Recorded bool
	Known    bool
	Stored   []byte
}

// PutOnce writes rec, the record of m.ID, and puts m, in one statement sent in one round trip,
// unless the record is there already: then it writes nothing and reports the digest the record
// holds, for the caller to tell a redelivery (the same digest) from a reused ID. On a pool, or a
// connection outside a transaction, the statement is a transaction of its own, committed before
// PutOnce returns: the record and the message are both stored, or neither. webhook.Handler takes
// its deliveries with it.
//
// There, the dispatchers' wake-up (unless Config.NoNotify) is a second transaction sent in the
// same round trip, after the first (opened with BEGIN, so that its COMMIT draws no warning)
// commits, and committed without waiting for its WAL flush:
// Postgres holds one lock, shared by the whole server, across a notifying transaction's commit,
// and a commit that waits for its flush under it serialises every notifying commit on the
// flushes. A wake-up that fails or is lost (the server or the process stops between the two
// commits) does not fail PutOnce, whose record and message are committed: the message is
// delivered at a dispatcher's next poll (DispatcherConfig.Poll) instead of at once. A statement
// that fails before the COMMIT costs a second round trip, a ROLLBACK, so that the connection is
// left out of any transaction: the pool keeps it, and a caller's connection can go on.
//
// It is inbox.Inbox.Claim followed by Put in one transaction, decided in SQL so that nothing
// waits on the caller between them:
//   - a concurrent call for the same record waits, up to rec.LockTimeout, for this one to commit
//     (then it finds the record Known) or to roll back (then it records and puts m itself);
//   - a message already in the outbox under m.ID with the same content (the record was purged
//     before the message was) is not put again, and the record is written (Recorded);
//   - one with other content is ErrMismatch, and nothing is written, unless the record is there:
//     then it is Known, as Claim would find it;
//   - a message put under m.ID by another transaction between the statement's snapshot and its
//     INSERT (not by another PutOnce of the record, which waits on the record) fails the
//     statement with a unique violation: nothing is written, and the next call sees it.
//
// db is a *pgxpool.Pool or a *pgx.Conn, or a pgx.Tx: then the batch is part of the caller's
// transaction, notifies in it as Put does, and any error leaves that transaction aborted.
func (o *Outbox) PutOnce(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, rec InboxRecord, m Message) (Once, error) {
	if err := o.complete(ctx, &m); err != nil {
		return Once{}, err
	}
	if rec.Consumer == "" {
		return Once{}, fmt.Errorf("%w: InboxRecord.Consumer is empty; name the inbox consumer whose record of %q this is", ErrInvalidMessage, m.ID)
	}
	digest := m.digest()
	headers, payload, orderingKey := m.columns()

	// own: the connection the batch runs on, when it is a transaction of its own there, so that
	// the wake-up can be one of its own after it. On a pool, the connection is taken here, to
	// be left out of any transaction before it goes back.
	var own *pgx.Conn
	if !o.cfg.NoNotify {
		if pool, ok := db.(*pgxpool.Pool); ok {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return Once{}, fmt.Errorf("outbox: put %s once for %s: %w", m.ID, rec.Consumer, err)
			}
			defer c.Release()
			db = c
		}
		own = idleConn(db)
	}
	wakeAfter := own != nil
	var once Once
	var mismatch, committed bool
	b := &pgx.Batch{}
	if wakeAfter {
		// The delivery's transaction is opened explicitly, so that the COMMIT below ends it
		// without Postgres's warning (a line in its log for every delivery) that a COMMIT
		// with no BEGIN gives.
		b.Queue("BEGIN")
	}
	if orderingKey != nil {
		b.Queue("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "tempotent.outbox."+o.cfg.Schema+"."+m.OrderingKey)
	}
	// The transaction's own lock_timeout is kept while the statement runs under the record's,
	// and put back after it, so that the commit (which, in a caller's transaction, waits for
	// NOTIFY's lock) is not bounded.
	b.Queue("SELECT set_config('tempotent.inbox_saved_lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', $1, true)",
		lockTimeout(cmp.Or(rec.LockTimeout, 2*time.Second)))
	b.Queue(o.putOnceStatement(), rec.Consumer, m.ID, rec.Digest, m.Topic, orderingKey, payload, headers, digest,
		!o.cfg.NoNotify && !wakeAfter, notifyChannel, o.cfg.Schema).QueryRow(func(row pgx.Row) error {
		return row.Scan(&once.Recorded, &mismatch)
	})
	// The lock_timeout is put back, and the record read, by a statement of its own, so that
	// its snapshot sees a record that a concurrent call committed while the INSERT above
	// waited for it.
	b.Queue(`SELECT set_config('lock_timeout', current_setting('tempotent.inbox_saved_lock_timeout'), true), r.consumer IS NOT NULL, r.digest
		FROM (SELECT) one LEFT JOIN `+o.inbox()+` r ON r.consumer = $1 AND r.message_id = $2`, rec.Consumer, m.ID).QueryRow(func(row pgx.Row) error {
		var restored string
		return row.Scan(&restored, &once.Known, &once.Stored)
	})
	if wakeAfter {
		// The record and the message are committed here, flushed as the caller's commits are;
		// the wake-up's transaction (an implicit one, up to the batch's Sync) holds NOTIFY's lock
		// only while its commit record is written, not flushed.
		b.Queue("COMMIT").Exec(func(pgconn.CommandTag) error { committed = true; return nil })
		b.Queue(o.wake, notifyChannel, o.cfg.Schema)
	}
	err := db.SendBatch(ctx, b).Close()
	if wakeAfter && !committed {
		rollback(ctx, own)
	}
	if err != nil && !committed {
		return Once{}, fmt.Errorf("outbox: put %s once for %s: %w", m.ID, rec.Consumer, schema.Explain(err, o.cfg.Schema))
	}
	switch {
	case once.Recorded:
		once.Known, once.Stored = false, nil
		return once, nil
	case once.Known:
		return once, nil
	case mismatch:
		return Once{}, fmt.Errorf("%w: %q is already in the outbox with another topic, ordering key, payload or headers; nothing was written",
			ErrMismatch, m.ID)
	}
	return Once{}, fmt.Errorf("outbox: put %s once for %s: its record was there and is gone (purged meanwhile); nothing was written, call again",
		m.ID, rec.Consumer)
}

// wakeStatement notifies the dispatchers ($1 channel, $2 payload) in a transaction that does not
// wait for its commit's WAL flush: a wake-up lost to a crash only delays delivery to the poll.
const wakeStatement = "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)"

// idleConn is the connection db is when it is one that is not in a transaction, where a batch is
// a transaction of its own (a COMMIT in the batch would end the caller's), and nil otherwise.
func idleConn(db any) *pgx.Conn {
	var conn *pgx.Conn
	switch db := db.(type) {
	case *pgxpool.Conn:
		conn = db.Conn()
	case *pgx.Conn:
		conn = db
	}
	if conn == nil || conn.PgConn().TxStatus() != 'I' {
		return nil
	}
	return conn
}

// rollback ends the transaction that PutOnce's batch opened on conn, if a statement failed
// before its COMMIT: Postgres skips the rest of the batch, COMMIT included, and leaves the
// connection in a failed transaction after the batch's Sync, where a pool would close it and a
// caller could not use it. The ROLLBACK is sent even when ctx has ended meanwhile (the
// statement's failure may be why), bounded by rollbackTimeout. As pgx's Tx.Rollback does, a
// connection that the ROLLBACK fails on is closed.
func rollback(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		_ = conn.Close(rctx)
	}
}

// rollbackTimeout bounds rollback's ROLLBACK, which waits for no lock.
const rollbackTimeout = 5 * time.Second

// putOnceStatement writes the record ($1 consumer, $2 ID, $3 digest) and puts the message ($2
// ID, $4 topic, $5 ordering key, $6 payload, $7 headers, $8 digest) when the record is new, and
// notifies ($9: whether, $10 channel, $11 payload) when it put it. It returns whether it wrote the
// record, and whether the outbox held other content under the ID (then it wrote nothing).
//
// prior reads the outbox under the statement's snapshot. A message committed after it is not
// seen; the put then fails on outbox_id_key (it has no ON CONFLICT) rather than record a
// delivery whose message it has not checked: another PutOnce of the same ID cannot be that
// writer, since it waits on the record first.
func (o *Outbox) putOnceStatement() string {
	return `WITH prior AS (
			SELECT digest FROM ` + o.table + ` WHERE id = $2
		), record AS (
			INSERT INTO ` + o.inbox() + ` (consumer, message_id, digest)
			SELECT $1::text, $2::text, $3::bytea
			WHERE NOT EXISTS (SELECT FROM prior WHERE digest <> $8::bytea)
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING true
		), put AS (
			INSERT INTO ` + o.table + ` (id, topic, ordering_key, payload, headers, digest)
			SELECT $2::text, $4::text, $5::text, $6::bytea, $7::jsonb, $8::bytea FROM record
			WHERE NOT EXISTS (SELECT FROM prior)
			RETURNING CASE WHEN $9::bool THEN pg_notify($10::text, $11::text) END
		)
		SELECT EXISTS (SELECT FROM record), EXISTS (SELECT FROM prior WHERE digest <> $8::bytea)`
}

// inbox is the quoted name of the schema's inbox table.
func (o *Outbox) inbox() string { return pgx.Identifier{o.cfg.Schema, "inbox"}.Sanitize() }

// lockTimeout renders d for Postgres' lock_timeout in whole milliseconds, rounded up: "0ms"
// would mean no timeout at all.
func lockTimeout(d time.Duration) string {
	return fmt.Sprintf("%dms", max((d+time.Millisecond-1)/time.Millisecond, 1))
}
