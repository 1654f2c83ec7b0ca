// The operator's side that the engine's tests drive beside the engine: migrating, purging,
// counting the unresolved receipts and partitioning the table, through the operator package
// (which imports nothing of the engine's), on the store's pool and schema.

package engine

import (
	"context"
	"strings"
	"time"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/operator"
)

// Migrate applies the toolkit's migrations to the store's schema, as activity's Store.Migrate.
func (s *Store) Migrate(ctx context.Context) error { return schema.Migrate(ctx, s.db, s.cfg.Schema) }

// operator is an operator client on the store's receipts.
func (s *Store) operator() *operator.Client {
	c, err := operator.NewClient(s.db, operator.Config{Schema: s.cfg.Schema, Retention: s.cfg.Retention})
	if err != nil {
		panic(err) // a schema name and a retention NewStore accepted: NewClient accepts them too
	}
	return c
}

// Purge is operator.Client.Purge on the store's table.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	return s.operator().Purge(ctx, limit)
}

// Unresolved is operator.Client.Unresolved on the store's table.
func (s *Store) Unresolved(ctx context.Context) (int64, error) { return s.operator().Unresolved(ctx) }

// Partition is operator.Client.Partition on the store's table.
func (s *Store) Partition(ctx context.Context) error { return s.operator().Partition(ctx) }

// The operator's conditions and helpers that the explorer checks Purge against, as activity's
// partition.go and operator.go state them. They are the explorer's own statement of what Purge
// may forget and what an operator must see: a Purge that drifts from them fails the explorer.
const (
	// unresolved: a receipt whose outcome nobody knows (recorded OutcomeUnknown, or pending with
	// an ended lease after an attempt that may have had its effect).
	unresolved = `(error_type = 'tempotent.OutcomeUnknown' OR (state = 'pending' AND effect_possible AND lease_expires_at <= now()))`
	// purgeable: past its retention and settled.
	purgeable = `expires_at <= now() AND (state = 'completed'
		OR (state = 'failed' AND error_type IS DISTINCT FROM 'tempotent.OutcomeUnknown')
		OR (state = 'pending' AND NOT effect_possible AND lease_expires_at <= now()))`
	// moveSetting is the transaction-local setting under which Purge moves receipts between
	// partitions, which the uniqueness trigger skips.
	moveSetting = "tempotent.move"
)

// pgLiteral is t as a timestamptz literal for DDL, which takes no bind parameters.
func pgLiteral(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz"
}

// firstLine is a statement's first line, to name it in an error.
func firstLine(stmt string) string {
	line, _, _ := strings.Cut(stmt, "\n")
	return line
}
