// What the webhook intakes answered, from the tallies their handlers flush (webhook_tallies).

package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
)

// WebhookTalliesRetention is how long the webhook tallies are kept: the worker's purge
// (PurgeWebhookTallies) deletes the minutes older than it, in the same round as the inbox's
// records.
const WebhookTalliesRetention = 7 * 24 * time.Hour

// WebhookTally is what one webhook source's intake (webhook.Handler) answered within a window,
// as its handlers counted it and flushed it (webhook.HandlerConfig.TallyEvery). It is an
// operator's view, not an exact count: what a handler counted since its last flush is not in
// it yet, and is lost if the process dies before webhook.Handler.Close; the handler's metrics
// (webhook.MetricAccepted, …) are the exact count.
type WebhookTally struct {
	Source string
	// Accepted deliveries were new, and stored; Duplicate ones were seen before and answered
	// 2xx, storing nothing; Refused ones were answered 4xx (forged, stale, oversized,
	// malformed, …); Failed ones were answered 5xx, not stored, for the provider to retry.
	Accepted, Duplicate, Refused, Failed int64
	// Reasons counts the refused and failed deliveries by reason, as the metrics tag them:
	// "signature", "stale", "oversized", "malformed", "unreadable", "mismatch", "tenant",
	// "method" for refusals, "store" and "topic" for failures. The handler chooses them from
	// that fixed set, never from what a sender sent.
	Reasons map[string]int64
	// Last is the start of the newest minute with a count.
	Last time.Time
}

// WebhookTallies returns, per webhook source in name order, what its intake answered within
// window of now by the database's clock, in whole minutes (the minute window began in counts
// whole), from the schema's webhook_tallies table. Only sources with a count in the window are
// there; the tallies go back WebhookTalliesRetention at most.
func (c *Client) WebhookTallies(ctx context.Context, window time.Duration) ([]WebhookTally, error) {
	if window < time.Minute {
		return nil, fmt.Errorf("webhook tallies: window is %v; give at least a minute: tallies are kept per minute", window)
	}
	rows, err := c.db.Query(ctx, fmt.Sprintf(webhookTallies, schema.WebhookTalliesTable(c.cfg.Schema)), window.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("webhook tallies: %w", c.explain(err))
	}
	var out []WebhookTally
	var (
		source, outcome, reason string
		n                       int64
		last                    time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&source, &outcome, &reason, &n, &last}, func() error {
		if len(out) == 0 || out[len(out)-1].Source != source {
			out = append(out, WebhookTally{Source: source, Reasons: map[string]int64{}})
		}
		t := &out[len(out)-1]
		switch outcome {
		case schema.TallyAccepted:
			t.Accepted += n
		case schema.TallyDuplicate:
			t.Duplicate += n
		case schema.TallyRefused:
			t.Refused += n
		case schema.TallyFailed:
			t.Failed += n
		}
		if reason != "" {
			t.Reasons[reason] += n
		}
		if last.After(t.Last) {
			t.Last = last
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("webhook tallies: %w", c.explain(err))
	}
	return out, nil
}

// webhookTallies sums %s's counts of the minutes within $1 microseconds of now, by source,
// outcome and reason; the primary key, minute first, finds them.
const webhookTallies = `
SELECT source, outcome, reason, sum(count)::bigint, max(minute) FROM %s
WHERE minute >= date_trunc('minute', now() - $1::bigint * interval '1 microsecond')
GROUP BY source, outcome, reason ORDER BY source, outcome, reason`

// PurgeWebhookTallies deletes up to limit rows of the webhook tallies whose minute began more
// than olderThan ago (PurgeBatchDefault when limit is not positive), and returns how many it
// deleted. It refuses an olderThan under a minute. Call it periodically, repeating while it
// returns limit, as Purge; the worker does, with WebhookTalliesRetention.
func (c *Client) PurgeWebhookTallies(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if olderThan < time.Minute {
		return 0, fmt.Errorf("purge webhook tallies: olderThan is %v; it must be at least a minute", olderThan)
	}
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	tag, err := c.exec(ctx, fmt.Sprintf(purgeWebhookTallies, schema.WebhookTalliesTable(c.cfg.Schema)), olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge webhook tallies: %w", c.explain(err))
	}
	return tag.RowsAffected(), nil
}

// purgeWebhookTallies deletes up to $2 rows of %[1]s older than $1 microseconds, found through
// the primary key, minute first. SKIP LOCKED passes over a row a handler's flush is adding to;
// such a row is the current minute's, and no purge would delete it anyway.
const purgeWebhookTallies = `
DELETE FROM %[1]s WHERE (minute, source, outcome, reason) IN (
	SELECT minute, source, outcome, reason FROM %[1]s
	WHERE minute < now() - $1::bigint * interval '1 microsecond'
	LIMIT $2 FOR UPDATE SKIP LOCKED)`
