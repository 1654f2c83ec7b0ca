// Counting receipts: by operation and state (Stats), by state since a time (CountSince), and the
// unresolved ones (Unresolved).

package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
)

// Stats is a count of receipts by operation and state.
type Stats struct {
	Operations []OperationStats
	Total      OperationStats
	// OldestUnresolved is how long the longest-waiting unresolved receipt has waited (since its
	// outcome became unknown or its lease ended); zero when there is none.
	OldestUnresolved time.Duration
	// Expired counts the receipts past their retention that Purge has not deleted yet (the
	// unresolved among them it keeps).
	Expired int64
}

// OperationStats counts one operation's receipts (Operation is empty in Stats.Total).
type OperationStats struct {
	Operation                                       string
	Running, LeaseEnded, Succeeded, Failed, Unknown int64
	Unresolved                                      int64
}

// Stats counts the receipts by operation and state. It reads the whole table: on a large one,
// run it off peak or against a replica.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	q := fmt.Sprintf(`SELECT operation,
	count(*) FILTER (WHERE state = 'pending' AND lease_expires_at > now()),
	count(*) FILTER (WHERE state = 'pending' AND lease_expires_at <= now()),
	count(*) FILTER (WHERE state = 'completed'),
	count(*) FILTER (WHERE state = 'failed' AND error_type IS DISTINCT FROM 'tempotent.OutcomeUnknown'),
	count(*) FILTER (WHERE error_type = 'tempotent.OutcomeUnknown'),
	count(*) FILTER (WHERE %[2]s)
FROM %[1]s GROUP BY operation ORDER BY operation`, c.receipts, schema.Unresolved)
	rows, err := c.db.Query(ctx, q)
	if err != nil {
		return Stats{}, fmt.Errorf("count receipts: %w", c.explain(err))
	}
	var st Stats
	st.Operations, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperationStats, error) {
		var o OperationStats
		err := row.Scan(&o.Operation, &o.Running, &o.LeaseEnded, &o.Succeeded, &o.Failed, &o.Unknown, &o.Unresolved)
		return o, err
	})
	if err != nil {
		return Stats{}, fmt.Errorf("count receipts: %w", c.explain(err))
	}
	for _, o := range st.Operations {
		st.Total.Running += o.Running
		st.Total.LeaseEnded += o.LeaseEnded
		st.Total.Succeeded += o.Succeeded
		st.Total.Failed += o.Failed
		st.Total.Unknown += o.Unknown
		st.Total.Unresolved += o.Unresolved
	}
	u, err := c.unresolvedNow(ctx)
	if err != nil {
		return Stats{}, err
	}
	st.OldestUnresolved = u.oldest
	err = c.db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE expires_at <= now()`, c.receipts)).Scan(&st.Expired)
	if err != nil {
		return Stats{}, fmt.Errorf("count expired receipts: %w", c.explain(err))
	}
	return st, nil
}

// Unresolved returns how many receipts are unresolved now: recorded as OutcomeUnknown, or
// pending with an ended lease after an attempt that may have had its effect. The second kind
// includes, for a moment, intents between two attempts of a retry; one that stays is an intent
// whose workflow gave up on it. Each needs someone to find out, under its token, what the
// downstream did.
func (c *Client) Unresolved(ctx context.Context) (int64, error) {
	u, err := c.unresolvedNow(ctx)
	return u.count, err
}

// unresolvedCount is what countUnresolved reads.
type unresolvedCount struct {
	count, held int64
	oldest      time.Duration
}

func (c *Client) unresolvedNow(ctx context.Context) (unresolvedCount, error) {
	var (
		u        unresolvedCount
		oldestUS int64
	)
	if err := c.scanTimed(ctx, fmt.Sprintf(countUnresolved, c.receipts, schema.Unresolved), nil, &u.count, &u.held, &oldestUS); err != nil {
		return unresolvedCount{}, fmt.Errorf("count unresolved receipts: %w", c.explain(err))
	}
	u.oldest = time.Duration(oldestUS) * time.Microsecond
	return u, nil
}

// Counts is how many receipts are in each state; Unresolved counts those that Unresolved would
// (a subset of Pending and Failed).
type Counts struct {
	Pending, Completed, Failed, Unresolved int64
}

// CountSince counts, by state, the receipts first reserved at or after since (the zero time for
// all of them): a health check of a batch of intents, without SQL against the receipts table.
func (c *Client) CountSince(ctx context.Context, since time.Time) (Counts, error) {
	var n Counts
	err := c.scanTimed(ctx, fmt.Sprintf(countSince, c.receipts, schema.Unresolved), []any{since}, &n.Pending, &n.Completed, &n.Failed, &n.Unresolved)
	if err != nil {
		return Counts{}, fmt.Errorf("count receipts: %w", err)
	}
	return n, nil
}

// countUnresolved counts every unresolved receipt (%[2]s is schema.Unresolved), those of them
// past their retention (which Purge keeps), and how long ago the longest-waiting one became
// unresolved (its outcome recorded as unknown, or its lease ended), in microseconds. The first
// condition is the unresolved index's.
const countUnresolved = `SELECT count(*), count(*) FILTER (WHERE expires_at <= now()),
	coalesce((extract(epoch FROM now() - min(coalesce(completed_at, lease_expires_at))) * 1000000)::bigint, 0)
FROM %[1]s WHERE (state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND %[2]s`

// countSince counts the receipts first reserved at or after $1 by state, and the unresolved
// among them.
const countSince = `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'completed'),
	count(*) FILTER (WHERE state = 'failed'),
	count(*) FILTER (WHERE (state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND %[2]s)
FROM %[1]s WHERE created_at >= $1`
