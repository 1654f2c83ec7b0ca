// Faults between statements: the stepped batcher that parks an attempt before each receipt
// statement, runs it, loses its reply or fails it as a terminated backend would, and keeps the
// explorer's model of who holds which receipt after it ran.

package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// statementName names a receipt statement by its SQL.
func (s *Store) statementName(sql string) string {
	for name, stmt := range map[string]string{
		"reserve": s.sql.reserve, "read": s.sql.read, "takeOver": s.sql.takeOver, "complete": s.sql.complete,
		"completeSkipLocked": s.sql.completeSkipLocked, "completeBatch": s.sql.completeBatch, "release": s.sql.release,
		"extend": s.sql.extend, "readTakeOver": s.sql.readTakeOver,
	} {
		if sql == stmt {
			return name
		}
	}
	return "statement"
}

// steppedBatcher parks its attempt before each receipt statement and does what the explorer
// says: run it, run it and lose the reply, or fail as if the backend was terminated.
type steppedBatcher struct {
	inner batcher
	a     *explAttempt
	x     *explorer
}

var errConnectionLost = errors.New("explore: the connection to Postgres was lost")

func (b *steppedBatcher) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	q := batch.QueuedQueries[len(batch.QueuedQueries)-1]
	name := b.a.store.statementName(q.SQL)
	async := batch.QueuedQueries[0].SQL == b.a.store.sql.settingsAsync || batch.QueuedQueries[0].SQL == b.a.store.sql.reserveBatchSettingsAsync
	act := b.a.park(name, q.Arguments)
	if b.a.zombie && act != backendGone && (name == "release" || name == "complete" || name == "completeSkipLocked") {
		// It still holds the receipt as it records its outcome: no one took over while it
		// was paused, and its call is on record like any other.
		if current, ok := b.x.currentReservation(b.a.k); ok && current == b.a.reservation {
			b.a.zombie = false
		}
	}
	switch act {
	case backendGone, replyLost:
		b.a.storeFault = true
	}
	if _, locked := b.x.locks[b.a.k]; locked && name != "complete" && name != "completeSkipLocked" {
		// A lock wait past the lock timeout fails a release, heartbeat or takeover with a
		// store error. A completion must not fail so: it writes again until the lock is gone.
		b.a.storeFault = true
	}
	switch act {
	case backendGone:
		return failedResults{errConnectionLost}
	case replyLost:
		res := b.inner.SendBatch(ctx, batch)
		for range batch.QueuedQueries {
			_, _ = res.Exec()
		}
		_ = res.Close()
		b.after(name, q.Arguments, async, false)
		return failedResults{errConnectionLost}
	}
	return &observedResults{BatchResults: b.inner.SendBatch(ctx, batch), after: func() { b.after(name, q.Arguments, async, true) }}
}

// after keeps the explorer's model of who holds what after a statement ran; answered says
// whether the attempt got its reply.
func (b *steppedBatcher) after(name string, args []any, async, answered bool) {
	a, x := b.a, b.x
	switch name {
	case "read", "countUnresolved":
		return // reads commit nothing
	case "reserve":
		a.candidate = reservation(args[7].(pgtype.UUID).Bytes)
	case "takeOver":
		a.candidate = reservation(args[5].(pgtype.UUID).Bytes)
	case "readTakeOver":
		a.candidate = reservation(args[4].(pgtype.UUID).Bytes)
	}
	current, ok := x.currentReservation(a.k)
	took := ok && current == a.candidate
	if name == "readTakeOver" {
		if !took {
			return // it read, and wrote nothing
		}
		name = "takeOver"
	}
	if name != "reserve" || (took && !async) {
		clear(x.losable) // a durable commit flushes the WAL before it, and every reservation in it
	}
	switch name {
	case "reserve", "takeOver":
		if took {
			a.holds, a.reservation = true, a.candidate
			a.leaseEndedByFault, a.lost, a.faultOutsideFn = false, false, false
			if async && name == "reserve" {
				x.losable[a.candidate] = true
			}
		}
	case "extend":
		switch {
		case !answered || !a.holds:
		case !ok || current != a.reservation:
			a.heartbeatAfterLoss = true
		default:
			a.leaseEndedByFault, a.faultOutsideFn = false, false // its lease is live again
		}
	}
}

func (x *explorer) currentReservation(k *explKey) (reservation, bool) {
	var r pgtype.UUID
	err := x.pool.QueryRow(context.Background(), "SELECT reservation FROM "+x.table()+" WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
		k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID).Scan(&r)
	return r.Bytes, err == nil && r.Valid
}

// observedResults runs after once the caller has read its statement's results.
type observedResults struct {
	pgx.BatchResults
	after func()
}

func (r *observedResults) Close() error {
	err := r.BatchResults.Close()
	r.after()
	return err
}

// failedResults are the results of a batch whose connection broke.
type failedResults struct{ err error }

func (f failedResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedResults) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedResults) QueryRow() pgx.Row                { return failedRow(f) }
func (f failedResults) Close() error                     { return f.err }
func (f failedResults) Tx() pgx.Tx                       { return nil }

type failedRow struct{ err error }

func (f failedRow) Scan(...any) error { return f.err }
