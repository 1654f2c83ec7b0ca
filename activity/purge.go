package activity

import (
	"context"
	"fmt"
	"time"
)

// MetricUnresolvedHeld is the gauge, sent to Config.MetricsHandler after each Purge, of receipts
// past their retention that Purge kept because their outcome is unresolved: an attempt may have
// had its effect and nothing recorded what happened (OutcomeUnknown, or pending with an ended
// lease). They stay until an operator resolves them; alert when it is not zero.
const MetricUnresolvedHeld = "tempotent_receipts_unresolved_held"

// Purge deletes up to limit receipts whose retention has ended and whose outcome is settled
// (PurgeBatchDefault when limit is not positive), and returns how many it deleted. It never
// deletes an unresolved receipt — one recorded as OutcomeUnknown, or pending with an ended lease
// after an attempt that may have had its effect — however old: forgetting it would forget that
// an effect may have happened. Those are counted in the MetricUnresolvedHeld gauge; Unresolved
// counts them all. A pending receipt whose attempts certainly had no effect is deleted once its
// lease has ended, and a running attempt never loses its receipt.
//
// Call it periodically, repeating while it returns limit; each call is one short statement, so
// it never holds many locks or a long transaction.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	tag, err := s.exec(ctx, s.sql.purge, limit)
	if err != nil {
		return 0, fmt.Errorf("purge receipts: %w", err)
	}
	var held int64
	if err := s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.countHeld).Scan(&held); err != nil {
		return tag.RowsAffected(), fmt.Errorf("purge receipts: count the unresolved ones kept: %w", err)
	}
	s.cfg.MetricsHandler.Gauge(MetricUnresolvedHeld).Update(float64(held))
	return tag.RowsAffected(), nil
}

// Unresolved returns how many receipts are unresolved now: recorded as OutcomeUnknown, or
// pending with an ended lease after an attempt that may have had its effect. The second kind
// includes, for a moment, intents between two attempts of a retry; one that stays is an intent
// whose workflow gave up on it. Each needs someone to find out, under its token, what the
// downstream did.
func (s *Store) Unresolved(ctx context.Context) (int64, error) {
	var n int64
	if err := s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.countUnresolved).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unresolved receipts: %w", err)
	}
	return n, nil
}

// Counts is how many receipts are in each state; Unresolved counts those that Unresolved would
// (a subset of Pending and Failed).
type Counts struct {
	Pending, Completed, Failed, Unresolved int64
}

// CountSince counts, by state, the receipts first reserved at or after since (the zero time for
// all of them): a health check of a batch of intents, without SQL against the store's table.
func (s *Store) CountSince(ctx context.Context, since time.Time) (Counts, error) {
	var c Counts
	err := s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.countSince, since).Scan(&c.Pending, &c.Completed, &c.Failed, &c.Unresolved)
	if err != nil {
		return Counts{}, fmt.Errorf("count receipts: %w", err)
	}
	return c, nil
}
