package outbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
)

// Defaults applied by New.
const (
	// SchemaDefault is the Postgres schema of the outbox table: the receipts' schema.
	SchemaDefault = "tempotent"
	// MaxPayloadBytesDefault bounds a message's payload.
	MaxPayloadBytesDefault = 1 << 20
	// RetentionDefault is how long a delivered message is kept before Prune deletes it. Put
	// refuses a second message with a kept message's ID and other content, and accepts the same
	// message again without a second delivery; past retention, the same ID is a new message.
	RetentionDefault = 7 * 24 * time.Hour
)

// notifyChannel is the LISTEN/NOTIFY channel of every outbox; the payload names the schema, so
// that a dispatcher wakes only for its own.
const notifyChannel = "tempotent_outbox"

// Config configures an Outbox. The zero Config (or nil) is valid.
type Config struct {
	// Schema is the Postgres schema that holds the outbox table (tempotent's migrations create
	// it: migrate.Up, or migrate.List for your own tool). Default SchemaDefault, the receipts'
	// schema.
	Schema string
	// MaxPayloadBytes bounds a message's payload; Put refuses a larger one with
	// ErrPayloadTooLarge. Default MaxPayloadBytesDefault.
	MaxPayloadBytes int
	// Retention is how long delivered messages are kept; see RetentionDefault.
	Retention time.Duration
	// NoNotify turns off the NOTIFY that Put sends so that dispatchers wake at once. Postgres
	// serialises the commits of notifying transactions on one lock: a producer committing
	// thousands of messages a second may prefer the dispatchers' polling delay to that lock.
	NoNotify bool
}

// Outbox puts messages into the outbox table in the caller's transaction, and administers the
// table. A Dispatcher delivers them.
type Outbox struct {
	db    *pgxpool.Pool
	cfg   Config
	table string // quoted schema.outbox
	wake  string // PutOnce's wake-up statement: wakeStatement, which tests replace to lose it
}

// Schema is the Postgres schema of the outbox's table.
func (o *Outbox) Schema() string { return o.cfg.Schema }

// New returns the Outbox of cfg.Schema on db.
func New(db *pgxpool.Pool, cfg *Config) (*Outbox, error) {
	if db == nil {
		return nil, errors.New("outbox.New: db is nil; pass a *pgxpool.Pool")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, MaxPayloadBytesDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	switch {
	case c.MaxPayloadBytes < 0:
		return nil, fmt.Errorf("outbox.New: MaxPayloadBytes is %d; give a positive limit, or 0 for the default", c.MaxPayloadBytes)
	case c.Retention < 0:
		return nil, fmt.Errorf("outbox.New: Retention is %s; give a positive duration, or 0 for the default", c.Retention)
	}
	return &Outbox{db: db, cfg: c, table: pgx.Identifier{c.Schema, "outbox"}.Sanitize(), wake: wakeStatement}, nil
}

// Message is one message to deliver.
type Message struct {
	// ID is what consumers deduplicate on: the same business intent must give the same ID on
	// every retry of the transaction that puts it, and different intents different IDs. Empty
	// derives it from the receipt being executed (the token in ctx, inside activity.Do,
	// DoInNewTx and DoInTx) and the topic and ordering key; outside a receipt it must be given.
	ID string
	// Topic names what the message is about; publishers route on it. Required.
	Topic string
	// OrderingKey, when set, makes delivery ordered: messages with the same key are delivered
	// one at a time, in the order their transactions committed, each after the one before it
	// is delivered. A dead message holds back the rest of its key until it is requeued or
	// discarded. Empty: delivered as soon as possible, in parallel with others.
	OrderingKey string
	// Payload is delivered as is.
	Payload []byte
	// Headers travel with the message (an HTTP publisher sends them as headers).
	Headers map[string]string
}

// Errors of Put, matched with errors.Is.
var (
	// ErrMismatch: a message with this ID was already put with other content. Nothing was
	// written; the transaction can go on.
	ErrMismatch = errors.New("outbox: message ID reused with other content")
	// ErrPayloadTooLarge: the payload exceeds Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("outbox: payload too large")
	// ErrInvalidMessage: no topic, or no ID outside a receipt, or an empty header name.
	ErrInvalidMessage = errors.New("outbox: invalid message")
)

// ErrNotMigrated is migrate.ErrNotMigrated: the outbox table is missing; apply tempotent's
// migrations (migrate.Up).
//
// Deprecated: match migrate.ErrNotMigrated, the one name of this error; removed in the release
// after next.
var ErrNotMigrated = migrate.ErrNotMigrated

// Put writes m in tx, to be delivered once tx commits; if tx rolls back, the message was never
// sent. Putting a message whose ID is already in the outbox with the same content does nothing
// (a retried transaction cannot send it twice); with other content it fails with ErrMismatch.
//
// An ordered message (OrderingKey set) takes a transaction-scoped advisory lock on its key, so
// that transactions putting messages on one key commit one after another, in the order their
// messages are delivered. Hold it for as short a time as the business change allows.
func (o *Outbox) Put(ctx context.Context, tx pgx.Tx, m Message) error {
	if err := o.complete(ctx, &m); err != nil {
		return err
	}
	digest := m.digest()
	headers, payload, orderingKey := m.columns()

	b := &pgx.Batch{}
	if orderingKey != nil {
		b.Queue("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "tempotent.outbox."+o.cfg.Schema+"."+m.OrderingKey)
	}
	// No row (and no notification) when the ID is already there.
	b.Queue(`WITH put AS (
			INSERT INTO `+o.table+` (id, topic, ordering_key, payload, headers, digest)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO NOTHING
			RETURNING seq)
		SELECT CASE WHEN $7 THEN pg_notify($8, $9) END FROM put`,
		m.ID, m.Topic, orderingKey, payload, headers, digest, !o.cfg.NoNotify, notifyChannel, o.cfg.Schema)
	results := tx.SendBatch(ctx, b)
	if orderingKey != nil {
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			return fmt.Errorf("outbox: put %s: lock ordering key: %w", m.ID, err)
		}
	}
	rows, _ := results.Query()
	inserted := rows.Next()
	rows.Close()
	if err := cmp.Or(rows.Err(), results.Close()); err != nil {
		return fmt.Errorf("outbox: put %s: %w", m.ID, schema.Explain(err, o.cfg.Schema))
	}
	if inserted {
		return nil
	}

	var stored []byte
	var state string
	if err := tx.QueryRow(ctx, "SELECT digest, state FROM "+o.table+" WHERE id = $1", m.ID).Scan(&stored, &state); err != nil {
		return fmt.Errorf("outbox: put %s: read the message already put under this ID: %w", m.ID, err)
	}
	if !bytes.Equal(stored, digest) {
		return fmt.Errorf("%w: %q is already in the outbox (%s) with another topic, ordering key, payload or headers; give each message its own ID",
			ErrMismatch, m.ID, state)
	}
	return nil
}

// complete fills m's ID from the receipt in ctx, and validates m.
func (o *Outbox) complete(ctx context.Context, m *Message) error {
	if m.Topic == "" {
		return fmt.Errorf("%w: Message.Topic is empty; name what the message is about", ErrInvalidMessage)
	}
	if len(m.Payload) > o.cfg.MaxPayloadBytes {
		return fmt.Errorf("%w: %d bytes, above MaxPayloadBytes %d; put a reference to the data instead",
			ErrPayloadTooLarge, len(m.Payload), o.cfg.MaxPayloadBytes)
	}
	for name := range m.Headers {
		if name == "" {
			return fmt.Errorf("%w: a header has an empty name", ErrInvalidMessage)
		}
	}
	if m.ID != "" {
		return nil
	}
	token, ok := keys.TokenFrom(ctx)
	if !ok {
		return fmt.Errorf("%w: Message.ID is empty and no receipt is being executed to derive it from; give an ID that is the same on every retry of this transaction (for example the business event's own ID)",
			ErrInvalidMessage)
	}
	m.ID = IDFor(token, m.Topic, m.OrderingKey)
	return nil
}

// IDFor is the ID that Put gives a message without one, put while the receipt of token is
// executed: the same on every attempt of that intent, distinct per topic and ordering key. Two
// messages with the same topic and key in one receipt need IDs of their own.
func IDFor(token keys.Token, topic, orderingKey string) string {
	h := sha256.New()
	for _, part := range []string{token.String(), topic, orderingKey} {
		writeField(h, part)
	}
	return fmt.Sprintf("%s/%x", token, h.Sum(nil)[:12])
}

// digest identifies the content of m apart from its ID.
func (m Message) digest() []byte {
	h := sha256.New()
	writeField(h, m.Topic)
	writeField(h, m.OrderingKey)
	writeField(h, string(m.Payload))
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		writeField(h, name)
		writeField(h, m.Headers[name])
	}
	return h.Sum(nil)
}

// columns are m's headers, payload and ordering key as the outbox table stores them: no headers
// are an empty object, no payload an empty one, and no ordering key NULL.
func (m Message) columns() (headers map[string]string, payload []byte, orderingKey *string) {
	headers, payload = m.Headers, m.Payload
	if headers == nil {
		headers = map[string]string{}
	}
	if payload == nil {
		payload = []byte{}
	}
	if m.OrderingKey != "" {
		orderingKey = &m.OrderingKey
	}
	return headers, payload, orderingKey
}

// writeField writes s length-prefixed, so that no two sequences of fields hash alike.
func writeField(h interface{ Write([]byte) (int, error) }, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	_, _ = h.Write(n[:])
	_, _ = h.Write([]byte(s))
}

// Check reports whether the outbox's schema has its table; its error says how to create it.
func (o *Outbox) Check(ctx context.Context) error {
	if err := migrate.Check(ctx, o.db, o.cfg.Schema); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}
