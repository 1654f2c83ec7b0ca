package activity

import (
	"context"
	"fmt"
	"time"

	"github.com/tempotent/tempotent/internal/schema"
)

// MetricUnresolvedHeld is the gauge, sent to Config.MetricsHandler after each Purge, of receipts
// past their retention that Purge kept because their outcome is unresolved: an attempt may have
// had its effect and nothing recorded what happened (OutcomeUnknown, or pending with an ended
// lease). They stay until an operator resolves them; alert when it is not zero.
const MetricUnresolvedHeld = "tempotent_receipts_unresolved_held"

// MetricUnresolved is the gauge, sent with MetricUnresolvedHeld, of every unresolved receipt,
// within its retention or past it; MetricUnresolvedOldest is how long, in seconds, the
// longest-waiting of them has waited since its outcome became unknown or its lease ended. A
// lease that ended between two attempts of a retry counts for a moment; one that stays is an
// intent its workflow gave up on. Alert on the age: a few minutes is a retry, an hour is a person's job.
const (
	MetricUnresolved       = "tempotent_receipts_unresolved"
	MetricUnresolvedOldest = "tempotent_receipts_unresolved_oldest_seconds"
)

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
//
// On a partitioned table (Partition) it deletes no rows: it creates the partitions of the days
// ahead, and drops each day whose retention, and a day's grace, have passed since it ended,
// after moving the receipts that must stay (unresolved ones, and those whose retention was
// extended) into today's partition; limit is not used. It returns how many receipts the dropped
// days held, as Postgres' statistics estimate them. Creating a day blocks no receipt statement;
// dropping one takes the table's lock for milliseconds, and receipt statements wait behind it
// while it waits for that lock — at most Config.LockTimeout, after which it tries again at the
// next Purge.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	var n int64
	switch on, err := s.Partitioned(ctx); {
	case err != nil:
		return 0, fmt.Errorf("purge receipts: %w", err)
	case on:
		if n, err = s.purgePartitions(ctx); err != nil {
			return n, fmt.Errorf("purge receipts: %w", err)
		}
	default:
		tag, err := s.exec(ctx, s.sql.purge, limit)
		if err != nil {
			return 0, fmt.Errorf("purge receipts: %w", err)
		}
		n = tag.RowsAffected()
	}
	u, err := s.unresolvedNow(ctx)
	if err != nil {
		return n, fmt.Errorf("purge receipts: %w", err)
	}
	s.cfg.MetricsHandler.Gauge(MetricUnresolvedHeld).Update(float64(u.held))
	s.cfg.MetricsHandler.Gauge(MetricUnresolved).Update(float64(u.count))
	s.cfg.MetricsHandler.Gauge(MetricUnresolvedOldest).Update(u.oldest.Seconds())
	return n, nil
}

// Unresolved returns how many receipts are unresolved now: recorded as OutcomeUnknown, or
// pending with an ended lease after an attempt that may have had its effect. The second kind
// includes, for a moment, intents between two attempts of a retry; one that stays is an intent
// whose workflow gave up on it. Each needs someone to find out, under its token, what the
// downstream did.
func (s *Store) Unresolved(ctx context.Context) (int64, error) {
	u, err := s.unresolvedNow(ctx)
	return u.count, err
}

// unresolvedCount is what countUnresolved reads.
type unresolvedCount struct {
	count, held int64
	oldest      time.Duration
}

func (s *Store) unresolvedNow(ctx context.Context) (unresolvedCount, error) {
	var (
		u        unresolvedCount
		oldestUS int64
	)
	if err := s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.countUnresolved).Scan(&u.count, &u.held, &oldestUS); err != nil {
		return unresolvedCount{}, fmt.Errorf("count unresolved receipts: %w", s.explain(err))
	}
	u.oldest = time.Duration(oldestUS) * time.Microsecond
	return u, nil
}

// explain turns a missing table into ErrNotMigrated, with what to do.
func (s *Store) explain(err error) error { return schema.Explain(err, s.cfg.Schema) }

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
