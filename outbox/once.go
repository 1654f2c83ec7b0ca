package outbox

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
// holds, for the caller to tell a redelivery (the same digest) from a reused ID. On a pool or a
// connection, the batch is a transaction of its own (pgx sends a batch as one implicit
// transaction), committed before PutOnce returns: the record and the message are both stored,
// or neither. webhook.Handler takes its deliveries with it.
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
// transaction, and any error leaves that transaction aborted.
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

	var once Once
	var mismatch bool
	b := &pgx.Batch{}
	if orderingKey != nil {
		b.Queue("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "tempotent.outbox."+o.cfg.Schema+"."+m.OrderingKey)
	}
	// The transaction's own lock_timeout is kept while the statement runs under the record's,
	// and put back after it, so that the commit (which waits for NOTIFY's lock) is not bounded.
	b.Queue("SELECT set_config('tempotent.inbox_saved_lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', $1, true)",
		lockTimeout(cmp.Or(rec.LockTimeout, 2*time.Second)))
	b.Queue(o.putOnceStatement(), rec.Consumer, m.ID, rec.Digest, m.Topic, orderingKey, payload, headers, digest,
		!o.cfg.NoNotify, notifyChannel, o.cfg.Schema).QueryRow(func(row pgx.Row) error {
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
	if err := db.SendBatch(ctx, b).Close(); err != nil {
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
