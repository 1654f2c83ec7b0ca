// What the inbox holds, for operators (tempotent inbox, tempotent webhooks): read only.

package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Page sizes of Records.
const (
	RecordsLimitDefault = 100
	RecordsLimitMax     = 1000
)

// Querier is what Consumers reads through: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ConsumerStats is what the inbox holds for one consumer.
type ConsumerStats struct {
	Consumer string
	// Records counts the consumer's records: the messages it processed within its retention.
	Records int64
	// Oldest and Newest are the processing times of its oldest and newest records.
	Oldest, Newest time.Time
	// Recent counts the records processed within the window given to Consumers.
	Recent int64
}

// Consumers counts the records of each consumer in the inbox of schema (SchemaDefault when
// empty), by consumer name, with how many were processed within window of now by the database's
// clock (none counted when window <= 0). A webhook intake's consumer is "webhook/" and its source.
// It reads the whole inbox table: on a large one, run it off peak.
func Consumers(ctx context.Context, db Querier, schema string, window time.Duration) ([]ConsumerStats, error) {
	if schema == "" {
		schema = SchemaDefault
	}
	rows, err := db.Query(ctx, `SELECT consumer, count(*), min(processed_at), max(processed_at),
			count(*) FILTER (WHERE $1::bigint > 0 AND processed_at >= now() - $1::bigint * interval '1 microsecond')
		FROM `+pgx.Identifier{schema, "inbox"}.Sanitize()+` GROUP BY consumer ORDER BY consumer`, window.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("inbox: count the consumers' records: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConsumerStats, error) {
		var c ConsumerStats
		err := row.Scan(&c.Consumer, &c.Records, &c.Oldest, &c.Newest, &c.Recent)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: count the consumers' records: %w", err)
	}
	return out, nil
}

// Record is one message a consumer processed.
type Record struct {
	// MessageID is the message's ID as the producer gave it; for a webhook intake,
	// webhook.MessageID's "webhook/SOURCE/"TENANT"/DELIVERY". Escape it before printing it to a
	// terminal: a producer, or a webhook's sender, chose it.
	MessageID   string
	ProcessedAt time.Time
	// Checked reports whether the record holds the payload's digest, so that the same ID with
	// another payload is refused (Message.Payload was given).
	Checked bool
}

// Records returns the consumer's most recent records, newest first, at most limit of them (0
// means RecordsLimitDefault; at most RecordsLimitMax).
func (i *Inbox) Records(ctx context.Context, limit int) ([]Record, error) {
	if limit == 0 {
		limit = RecordsLimitDefault
	}
	if limit < 1 || limit > RecordsLimitMax {
		return nil, fmt.Errorf("inbox: records: limit %d; give 1 to %d, or 0 for %d", limit, RecordsLimitMax, RecordsLimitDefault)
	}
	rows, err := i.db.Query(ctx, `SELECT message_id, processed_at, digest IS NOT NULL FROM `+i.table+`
		WHERE consumer = $1 ORDER BY processed_at DESC, message_id LIMIT $2`, i.cfg.Consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: records of %q: %w", i.cfg.Consumer, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Record])
	if err != nil {
		return nil, fmt.Errorf("inbox: records of %q: %w", i.cfg.Consumer, err)
	}
	return out, nil
}
