// Forgetting receipts once their retention has passed, never an unresolved one.

package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/telemetry"
)

// MetricUnresolvedHeld is the gauge, sent to Config.MetricsHandler after each Purge, of receipts
// past their retention that Purge kept because their outcome is unresolved: an attempt may have
// had its effect and nothing recorded what happened (OutcomeUnknown, or pending with an ended
// lease). They stay until an operator resolves them; alert when it is not zero.
const MetricUnresolvedHeld = telemetry.ReceiptsUnresolvedHeld

// MetricUnresolved is the gauge, sent with MetricUnresolvedHeld, of every unresolved receipt,
// within its retention or past it; MetricUnresolvedOldest is how long, in seconds, the
// longest-waiting of them has waited since its outcome became unknown or its lease ended. A
// lease that ended between two attempts of a retry counts for a moment; one that stays is an
// intent its workflow gave up on. Alert on the age: a few minutes is a retry, an hour is a person's job.
const (
	MetricUnresolved       = telemetry.ReceiptsUnresolved
	MetricUnresolvedOldest = telemetry.ReceiptsUnresolvedOldest
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
func (c *Client) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	var n int64
	switch on, err := c.Partitioned(ctx); {
	case err != nil:
		return 0, fmt.Errorf("purge receipts: %w", err)
	case on:
		if n, err = c.purgePartitions(ctx); err != nil {
			return n, fmt.Errorf("purge receipts: %w", err)
		}
	default:
		tag, err := c.exec(ctx, fmt.Sprintf(purge, c.receipts, schema.Purgeable), limit)
		if err != nil {
			return 0, fmt.Errorf("purge receipts: %w", err)
		}
		n = tag.RowsAffected()
	}
	u, err := c.unresolvedNow(ctx)
	if err != nil {
		return n, fmt.Errorf("purge receipts: %w", err)
	}
	c.cfg.MetricsHandler.Gauge(MetricUnresolvedHeld).Update(float64(u.held))
	c.cfg.MetricsHandler.Gauge(MetricUnresolved).Update(float64(u.count))
	c.cfg.MetricsHandler.Gauge(MetricUnresolvedOldest).Update(u.oldest.Seconds())
	return n, nil
}

// purge deletes up to $1 receipts that schema.Purgeable (%[2]s) says may go, from %[1]s:
// unresolved receipts are never deleted, however old, since deleting one would forget that an
// effect may have happened. SKIP LOCKED lets several purgers run without waiting on each other,
// or on a worker's attempt.
const purge = `
DELETE FROM %[1]s WHERE (tableoid, ctid) IN (
	SELECT tableoid, ctid FROM %[1]s WHERE %[2]s
	LIMIT $1 FOR UPDATE SKIP LOCKED)`

// PurgeInbox deletes up to limit inbox records of every consumer of the schema — package
// inbox's, and the delivery IDs webhook.Handler remembers under the consumer "webhook/" + its
// Source — processed more than olderThan ago (PurgeBatchDefault when limit is not positive),
// and returns how many it deleted. A record stores when it was processed, not its consumer's
// retention (inbox.Config.Retention, webhook.HandlerConfig.Retention), so olderThan must be at
// least the longest retention of any consumer of the schema: a record deleted before its
// consumer's retention ends lets a duplicate of its message run again. It refuses an olderThan
// under a minute.
//
// Call it periodically, repeating while it returns limit, as Purge; the worker does
// (worker.Config.InboxRetention).
func (c *Client) PurgeInbox(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if olderThan < time.Minute {
		return 0, fmt.Errorf("purge inbox: olderThan is %v; it must be at least a minute, and at least the longest Retention of the schema's inbox consumers and webhook handlers", olderThan)
	}
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	tag, err := c.exec(ctx, fmt.Sprintf(purgeInbox, pgx.Identifier{c.cfg.Schema, "inbox"}.Sanitize()), olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge inbox: %w", c.explain(err))
	}
	return tag.RowsAffected(), nil
}

// purgeInbox deletes up to $2 records of %[1]s, of any consumer, processed more than $1
// microseconds ago, found through the index of processing times. SKIP LOCKED passes over a
// record a consumer's transaction is writing (a delivery being claimed) rather than waiting on
// it; such a record is new, and no purge would delete it anyway.
const purgeInbox = `
DELETE FROM %[1]s WHERE (consumer, message_id) IN (
	SELECT consumer, message_id FROM %[1]s
	WHERE processed_at < now() - $1::bigint * interval '1 microsecond'
	LIMIT $2 FOR UPDATE SKIP LOCKED)`
