package engine

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// reservation identifies one reservation or takeover of a receipt: 128 random bits from the
// client, so that no two attempts ever hold the same one, whatever the database lost or purged
// (see statements).
type reservation [16]byte

func newReservation() reservation {
	var r reservation
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+)
	return r
}

// uuid is r as the bind parameter of a uuid column.
func (r reservation) uuid() pgtype.UUID { return pgtype.UUID{Bytes: r, Valid: true} }

// batcher is where receipt statements go: the pool, or the connection that DoInNewTx holds.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// send sends stmt behind settings (s.sql.settings, settingsAsync, or a batch statement's own:
// reserveBatchSettings, reserveBatchSettingsAsync, completeBatchSettings), in one round trip
// and one implicit transaction, so that the settings — local to that transaction — hold for
// stmt alone: its lock and statement timeouts, for an asynchronous reservation its commit, and
// for a batch statement its plan (genericPlan).
// With noSettings, stmt goes alone.
func (s *Store) send(ctx context.Context, db batcher, settings, stmt string, args ...any) pgx.BatchResults {
	b := &pgx.Batch{}
	if settings != noSettings {
		b.Queue(settings, s.lockTimeout, s.statementTimeout)
	}
	b.Queue(stmt, args...)
	return db.SendBatch(ctx, b)
}

// noSettings sends a statement without the settings statement before it, one statement less in
// its round trip: for statements that never wait for a row lock (a read; a completion that skips
// locked rows), so lock_timeout is moot, and that run under a deadline of their own
// (statementContext or writeContext, whose expiry cancels the statement as statement_timeout
// would). Such a statement goes alone, outside a batch, where db can send one (loneSender).
const noSettings = ""

// loneSender is a batcher that also sends one statement outside a batch: the pool, and the
// connection DoInNewTx holds. A statement without settings goes through it as pgx's QueryRow or
// Exec, not as a batch of one: pgx sends a batch in pipeline mode, whose bookkeeping cost the
// replay's lookup 18 allocations more for the same messages on the wire (Bind, Execute, Sync). The
// exploration tests' batchers are not loneSenders, and see such a statement as a batch of one.
type loneSender interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// settled consumes the settings' result, if settings were sent.
func settled(res pgx.BatchResults, settings string) error {
	if settings == noSettings {
		return nil
	}
	_, err := res.Exec()
	return err
}

// exec runs stmt under the store's timeouts.
func (s *Store) exec(ctx context.Context, stmt string, args ...any) (pgconn.CommandTag, error) {
	return s.execOn(ctx, s.receipts, s.sql.settings, stmt, args...)
}

func (s *Store) execOn(ctx context.Context, db batcher, settings, stmt string, args ...any) (pgconn.CommandTag, error) {
	if lone, ok := db.(loneSender); ok && settings == noSettings {
		return lone.Exec(ctx, stmt, args...)
	}
	res := s.send(ctx, db, settings, stmt, args...)
	err := settled(res, settings)
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = res.Exec()
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// queryRow runs stmt under settings and returns its one row.
func (s *Store) queryRow(ctx context.Context, db batcher, settings, stmt string, args ...any) pgx.Row {
	if lone, ok := db.(loneSender); ok && settings == noSettings {
		return lone.QueryRow(ctx, stmt, args...)
	}
	return settledRow{s.send(ctx, db, settings, stmt, args...), settings}
}

// settledRow is the row of a statement sent behind its settings.
type settledRow struct {
	res      pgx.BatchResults
	settings string
}

func (r settledRow) Scan(dest ...any) error {
	err := settled(r.res, r.settings)
	if err == nil {
		err = r.res.QueryRow().Scan(dest...)
	}
	if cerr := r.res.Close(); err == nil {
		err = cerr
	}
	return err
}

// query runs stmt under settings and calls each for every row.
func (s *Store) query(ctx context.Context, settings, stmt string, args []any, each func(pgx.Rows) error) error {
	res := s.send(ctx, s.receipts, settings, stmt, args...)
	err := settled(res, settings)
	if err == nil {
		var rows pgx.Rows
		rows, err = res.Query()
		for err == nil && rows.Next() {
			err = each(rows)
		}
		if rows != nil {
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}

// isLockTimeout reports whether err is Postgres giving up on a lock (lock_timeout).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// isUniqueViolation reports whether err is Postgres refusing a second receipt for a key: the
// unique index, or on a partitioned table the trigger that stands in for it (Store.Partition).
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
