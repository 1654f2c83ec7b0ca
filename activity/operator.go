// The operator's side's private vocabulary over the engine (internal/engine): the statements and
// helpers that operate.go, audit.go, purge.go and partition.go use. They move with those files
// to the operator's own package.

package activity

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/keys"
)

// Receipt states.
const (
	StatePending   = "pending"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// unresolved is the condition of a receipt whose outcome nobody knows: recorded as
// OutcomeUnknown, or pending with an ended lease after an attempt that may have had its effect.
// Purge keeps such receipts however old they are; an operator resolves them.
const unresolved = `(error_type = 'tempotent.OutcomeUnknown' OR (state = 'pending' AND effect_possible AND lease_expires_at <= now()))`

// operator is what the operator's methods of Store reach of the engine.
type operator struct {
	e                             *engine.Store
	sql                           operatorStatements
	receipts                      engine.Batcher
	lockTimeout, statementTimeout string
}

// operatorStatements are the operator's SQL, rendered for the store's table.
type operatorStatements struct {
	settings, purge, countUnresolved, countSince, resolveApplied, resolveNotApplied string
}

func newOperator(e *engine.Store) operator {
	o := operator{e: e, receipts: e.Receipts()}
	o.lockTimeout, o.statementTimeout = e.Timeouts()
	table := pgx.Identifier{e.Config().Schema, "receipts"}.Sanitize()
	o.sql = operatorStatements{
		settings: e.Settings(),
		// purge deletes up to $1 expired receipts whose outcome is settled: completed, failed
		// for a known reason, or pending after an attempt that certainly had no effect and whose
		// lease has ended. Unresolved receipts are never deleted, however old: deleting one would
		// forget that an effect may have happened. SKIP LOCKED lets several purgers run without
		// waiting on each other.
		purge: fmt.Sprintf(`
DELETE FROM %[1]s WHERE (tableoid, ctid) IN (
	SELECT tableoid, ctid FROM %[1]s WHERE %[2]s
	LIMIT $1 FOR UPDATE SKIP LOCKED)`, table, purgeable),

		// countUnresolved counts every unresolved receipt, those of them past their retention
		// (which purge keeps), and how long ago the longest-waiting one became unresolved (its
		// outcome recorded as unknown, or its lease ended), in microseconds. The first condition
		// is the unresolved index's.
		countUnresolved: fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE expires_at <= now()),
	coalesce((extract(epoch FROM now() - min(coalesce(completed_at, lease_expires_at))) * 1000000)::bigint, 0)
FROM %[1]s WHERE (state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND %[2]s`, table, unresolved),

		// resolveApplied and resolveNotApplied settle an unresolved receipt by hand ($1 its
		// token, $3 who, $4 why). Race: an attempt that takes over first makes the lease live, and
		// the receipt no longer unresolved, so the resolution matches nothing (and the other way
		// round). Applied completes the receipt with the result $5: no attempt's write matches a
		// completed receipt. Not applied leaves it pending with its lease ended and no effect
		// possible, so that the next attempt takes over and calls again under the same token; the
		// new reservation $2 (held by no attempt) is what keeps a stale holder of the ended lease
		// from completing or releasing it afterwards, and makes an attempt that read the receipt
		// before the resolution (and decided from its effect_possible) fail its takeover and read
		// again, as release does.
		resolveApplied: fmt.Sprintf(`
UPDATE %[1]s SET state = 'completed', result = $5, failure = NULL, error_type = NULL, error_message = NULL,
	reservation = $2, lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(expires_at, now() + $6::bigint * interval '1 microsecond'),
	resolved_at = now(), resolved_by = $3, resolution = $4
WHERE token = $1 AND %[2]s`, table, unresolved),
		resolveNotApplied: fmt.Sprintf(`
UPDATE %[1]s SET state = 'pending', result = NULL, failure = NULL, error_type = NULL, error_message = NULL,
	reservation = $2, lease_expires_at = least(coalesce(lease_expires_at, now()), now()), effect_possible = false,
	completed_at = NULL, updated_at = now(), resolved_at = now(), resolved_by = $3, resolution = $4
WHERE token = $1 AND %[2]s`, table, unresolved),

		// countSince counts receipts by state, and the unresolved among them.
		countSince: fmt.Sprintf(`SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'completed'),
	count(*) FILTER (WHERE state = 'failed'),
	count(*) FILTER (WHERE (state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND %[2]s)
FROM %[1]s WHERE created_at >= $1`, table, unresolved),
	}
	return o
}

func (o operator) exec(ctx context.Context, stmt string, args ...any) (pgconn.CommandTag, error) {
	return o.e.Exec(ctx, stmt, args...)
}

func (o operator) queryRow(ctx context.Context, db engine.Batcher, settings, stmt string, args ...any) pgx.Row {
	return o.e.QueryRow(ctx, db, settings, stmt, args...)
}

func (o operator) open(p *commonpb.Payload) (*commonpb.Payload, error) { return o.e.Open(p) }

func (o operator) encode(k keys.Key, v any) (*commonpb.Payload, error) { return o.e.Encode(k, v) }

func (o operator) checkSize(k keys.Key, p *commonpb.Payload) error { return o.e.CheckSize(k, p) }

// storedOutcome is the result column of a completed receipt.
type storedOutcome struct{ result []byte }

// outcome is the stored result of a receipt completed with p, for an operator's resolution; the
// error argument is always nil there (a resolution records a result, never a failure).
func (o operator) outcome(k keys.Key, p *commonpb.Payload, _ error) (storedOutcome, error) {
	r, err := o.e.StoredResult(k, p)
	return storedOutcome{result: r}, err
}

// reservation is a reservation identity held by no attempt.
type reservation struct{ id pgtype.UUID }

func newReservation() reservation { return reservation{engine.NewReservation()} }

func (r reservation) uuid() pgtype.UUID { return r.id }
