package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/outbox"
)

// messagesSchema holds the outbox and inbox tables of rows 8 and 9, migrated afresh, beside
// their bare counterparts; it is dropped before and after a run.
const messagesSchema = schema + "_messages"

// Tables of messagesSchema besides the migrations' own.
var (
	outboxTable   = pgx.Identifier{messagesSchema, "outbox"}.Sanitize()
	bareOutbox    = pgx.Identifier{messagesSchema, "bare_outbox"}.Sanitize()
	ordersTable   = pgx.Identifier{messagesSchema, "orders"}.Sanitize()
	intakeTable   = pgx.Identifier{messagesSchema, "intake"}.Sanitize()
	messageTopic  = "order.placed"
	messageBody   = []byte(`{"order":"ord_1","amount":4200,"currency":"eur","customer":"cus_1","items":[{"sku":"sku-1","units":2}]}`)
	messageDigest = func() []byte { s := sha256.Sum256(messageBody); return s[:] }()
)

// prepareMessages creates messagesSchema afresh with tempotent's migrations (the outbox and inbox
// tables), and the bare tables: bare_outbox, of the outbox's shape with only a primary key (what
// a hand-written outbox has: no unique message ID, no partial indexes, no NOTIFY); orders, the
// business row of the Put transaction; intake, the bare durable webhook handler's table.
// Autovacuum is off on the drained tables, which are truncated before every drain: no round
// meets a vacuum that another did not.
func prepareMessages(ctx context.Context, d *db) {
	if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+messagesSchema+" CASCADE"); err != nil {
		fatalf("drop schema: %v", err)
	}
	store, err := activity.NewStore(d.pool, &activity.Config{Schema: messagesSchema})
	if err != nil {
		fatalf("store: %v", err)
	}
	if err := store.Migrate(ctx); err != nil {
		fatalf("migrate %s: %v", messagesSchema, err)
	}
	_, err = d.pool.Exec(ctx, `
		CREATE TABLE `+bareOutbox+` (LIKE `+outboxTable+` INCLUDING DEFAULTS INCLUDING IDENTITY);
		ALTER TABLE `+bareOutbox+` ADD PRIMARY KEY (seq);
		ALTER TABLE `+bareOutbox+` SET (autovacuum_enabled = off);
		ALTER TABLE `+outboxTable+` SET (autovacuum_enabled = off);
		CREATE TABLE `+ordersTable+` (id text PRIMARY KEY, amount bigint NOT NULL);
		CREATE TABLE `+intakeTable+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body bytea NOT NULL);`)
	if err != nil {
		fatalf("create tables: %v", err)
	}
}

func openOutbox(d *db) *outbox.Outbox {
	o, err := outbox.New(d.pool, &outbox.Config{Schema: messagesSchema})
	if err != nil {
		fatalf("outbox: %v", err)
	}
	return o
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// A drain is one way of delivering n messages that were put beforehand: fill puts them
// (untimed), run delivers every one of them and returns.
type drain struct {
	name string
	fill func(ctx context.Context, n int)
	run  func(ctx context.Context, n int) error
}

// drains measures each drain once per round, in the rotating order of interleave, each on
// tables truncated, filled and analysed just before it, and returns messages per second per
// round.
func drains(ctx context.Context, d *db, rounds, n int, ds ...drain) [][]float64 {
	out := make([][]float64, len(ds))
	for r := range rounds {
		for i := range ds {
			j := (i + r) % len(ds)
			if _, err := d.pool.Exec(ctx, "TRUNCATE "+outboxTable+", "+bareOutbox); err != nil {
				fatalf("truncate: %v", err)
			}
			ds[j].fill(ctx, n)
			if _, err := d.pool.Exec(ctx, "ANALYZE "+outboxTable+", "+bareOutbox); err != nil {
				fatalf("analyze: %v", err)
			}
			start := time.Now()
			if err := ds[j].run(ctx, n); err != nil {
				fatalf("%s: %v", ds[j].name, err)
			}
			out[j] = append(out[j], float64(n)/time.Since(start).Seconds())
			var left int
			err := d.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+outboxTable+" WHERE state <> 'delivered') + (SELECT count(*) FROM "+bareOutbox+")").Scan(&left)
			if err != nil || left != 0 {
				fatalf("%s: %d messages left undelivered (%v)", ds[j].name, left, err)
			}
		}
	}
	return out
}

// putMessages puts n messages with Outbox.Put, in transactions of 100 from 4 goroutines.
func putMessages(o *outbox.Outbox, d *db) func(ctx context.Context, n int) {
	return func(ctx context.Context, n int) {
		const perTx, producers = 100, 4
		var taken atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for range producers {
			wg.Go(func() {
				for {
					first := int(taken.Add(perTx)) - perTx
					if first >= n {
						return
					}
					err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
						for range min(perTx, n-first) {
							if err := o.Put(ctx, tx, message()); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			fatalf("put: %v", *err)
		}
	}
}

// message is a new message of the benchmark's topic and payload.
func message() outbox.Message {
	return outbox.Message{ID: next("msg-"), Topic: messageTopic, Payload: messageBody}
}

// insertBare inserts n rows of the messages' content into bare_outbox, in one statement.
func insertBare(d *db) func(ctx context.Context, n int) {
	return func(ctx context.Context, n int) {
		_, err := d.pool.Exec(ctx, `INSERT INTO `+bareOutbox+` (id, topic, payload, digest)
			SELECT $1 || i, $2, $3, $4 FROM generate_series(1, $5) i`,
			next("bare-msg-")+"-", messageTopic, messageBody, messageDigest, n)
		if err != nil {
			fatalf("fill bare outbox: %v", err)
		}
	}
}

// dispatch delivers n put messages with k dispatchers of the given Concurrency, each calling
// Drain as Run does (batch after batch, each batch's marks sent with the next claim, until one
// comes back short), through a publisher that does nothing. Drain rather than Run: Run adds a
// LISTEN connection and the poll, which a drain of messages already there does not use.
func dispatch(o *outbox.Outbox, k, concurrency, batch int) func(ctx context.Context, n int) error {
	var delivered atomic.Int64
	pub := outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		delivered.Add(1)
		return nil
	})
	ds := make([]*outbox.Dispatcher, k)
	for i := range ds {
		var err error
		ds[i], err = outbox.NewDispatcher(o, pub, &outbox.DispatcherConfig{
			Batch: batch, Concurrency: concurrency, Maintenance: -1, Logger: discard,
		})
		if err != nil {
			fatalf("dispatcher: %v", err)
		}
	}
	return func(ctx context.Context, n int) error {
		delivered.Store(0)
		// Drain returns once a batch comes back short: one call per loop and pass.
		return untilDelivered(&delivered, n, len(ds), func(i int) (int, error) { _, err := ds[i].Drain(ctx); return 0, err }, batch)
	}
}

// claimDelete delivers n bare rows with k goroutines, each claiming a batch and deleting it in a
// transaction of its own, calling a publisher that does nothing for each row in between: the
// least a hand-written outbox does.
func claimDelete(d *db, k, batch int) func(ctx context.Context, n int) error {
	var delivered atomic.Int64
	publish := func(context.Context, outbox.Delivery) error {
		delivered.Add(1)
		return nil
	}
	once := func(ctx context.Context) (claimed int, err error) {
		err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, `SELECT seq, id, topic, payload, headers FROM `+bareOutbox+`
				ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
			var seqs []int64
			var dl outbox.Delivery
			var seq int64
			_, err := pgx.ForEachRow(rows, []any{&seq, &dl.ID, &dl.Topic, &dl.Payload, &dl.Headers}, func() error {
				seqs = append(seqs, seq)
				return publish(ctx, dl)
			})
			if err != nil || len(seqs) == 0 {
				return err
			}
			claimed = len(seqs)
			_, err = tx.Exec(ctx, "DELETE FROM "+bareOutbox+" WHERE seq = ANY ($1)", seqs)
			return err
		})
		return claimed, err
	}
	return func(ctx context.Context, n int) error {
		delivered.Store(0)
		return untilDelivered(&delivered, n, k, func(int) (int, error) { return once(ctx) }, batch)
	}
}

// untilDelivered runs k loops of step (the i-th loop calls step(i)) at once, each until a batch
// comes back short, and again until n messages are delivered: with SKIP LOCKED a loop can come
// back short while the others still hold the rest.
func untilDelivered(delivered *atomic.Int64, n, k int, step func(i int) (int, error), batch int) error {
	for pass := 0; delivered.Load() < int64(n); pass++ {
		if pass == 100 {
			return fmt.Errorf("%d of %d messages delivered after %d passes", delivered.Load(), n, pass)
		}
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for i := range k {
			wg.Go(func() {
				for {
					got, err := step(i)
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
					if got < batch {
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			return *err
		}
	}
	return nil
}

// putTx is the Put transaction: one business row and one message.
func putTx(o *outbox.Outbox, d *db) op {
	return func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			if err := order(ctx, tx); err != nil {
				return err
			}
			return o.Put(ctx, tx, message())
		})
	}
}

// bareRowTx is putTx with a plain INSERT of the message into bare_outbox instead of Put.
func bareRowTx(d *db) op { return rowTx(d, bareOutbox) }

// ownRowTx is putTx with the message INSERTed by hand into the outbox's own table instead of
// Put: the floor of Put, what the table's unique message ID and partial indexes cost whoever
// writes the row, with nothing around the INSERT (no conflict check, no notification).
func ownRowTx(d *db) op { return rowTx(d, outboxTable) }

// rowTx is putTx with a plain INSERT of the message into table instead of Put.
func rowTx(d *db, table string) op {
	return func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			if err := order(ctx, tx); err != nil {
				return err
			}
			m := message()
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (id, topic, payload, digest) VALUES ($1, $2, $3, $4)",
				m.ID, m.Topic, m.Payload, messageDigest)
			return err
		})
	}
}

func order(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+ordersTable+" VALUES ($1, 4200)", next("ord-"))
	return err
}

// roundTrips runs o n times, one after another, and returns its round trips per operation.
func roundTrips(ctx context.Context, d *db, n int, o op) float64 {
	d.counter.Reset()
	for range n {
		if err := o(ctx); err != nil {
			fatalf("count: %v", err)
		}
	}
	return float64(d.counter.RoundTrips()) / float64(n)
}
