package engine

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/keys"
)

// What the operator's side (listing, resolving, re-arming and purging receipts) uses of the
// engine: the same statements' plumbing, timeouts and result encoding as the receipts' own, so
// that an operator's write is bounded, and a result it records stored, exactly as an attempt's.

// Batcher is where receipt statements go: the pool, or a connection.
type Batcher = batcher

// Receipts is where the store's receipt statements go.
func (s *Store) Receipts() Batcher { return s.receipts }

// Exec runs stmt under the store's lock and statement timeouts.
func (s *Store) Exec(ctx context.Context, stmt string, args ...any) (pgconn.CommandTag, error) {
	return s.exec(ctx, stmt, args...)
}

// QueryRow runs stmt on db behind settings (Settings, or "" for none) and returns its one row.
func (s *Store) QueryRow(ctx context.Context, db Batcher, settings, stmt string, args ...any) pgx.Row {
	return s.queryRow(ctx, db, settings, stmt, args...)
}

// Settings is the statement that sets the store's lock and statement timeouts, $1 and $2 in
// milliseconds (Timeouts), for the one statement sent behind it.
func (s *Store) Settings() string { return s.sql.settings }

// Timeouts are the store's lock and statement timeouts in milliseconds, as set_config takes them.
func (s *Store) Timeouts() (lock, statement string) { return s.lockTimeout, s.statementTimeout }

// Open turns a stored result back into the DataConverter's payload (Config.Codecs undone).
func (s *Store) Open(p *commonpb.Payload) (*commonpb.Payload, error) { return s.open(p) }

// CheckSize refuses a result above Config.MaxPayloadBytes with a *PayloadTooLargeError.
func (s *Store) CheckSize(k keys.Key, p *commonpb.Payload) error { return s.checkSize(k, p) }

// StoredResult is the result column of a receipt completed with p, as an attempt stores it
// (sealed with Config.Codecs).
func (s *Store) StoredResult(k keys.Key, p *commonpb.Payload) ([]byte, error) {
	o, err := s.outcome(k, p, nil)
	return o.result, err
}

// NewReservation is a reservation identity held by no attempt: an operator's write that sets it
// keeps every attempt that held the receipt before from writing to it afterwards.
func NewReservation() pgtype.UUID { return newReservation().uuid() }
