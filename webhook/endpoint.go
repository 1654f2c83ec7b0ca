package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/schema"
)

// endpoints holds the topic of every Source a handler was built for in this process, per
// database and schema, for claimInProcess.
var endpoints = struct {
	sync.Mutex
	topics map[endpointKey]string
}{topics: map[endpointKey]string{}}

// endpointKey names where a handler remembers its deliveries: the database (by address, not by
// pool, so that two pools on one database are one), the schema, and the source.
type endpointKey struct {
	host     string
	port     uint16
	database string
	schema   string
	source   string
}

// claimInProcess records that source's deliveries in schema go to topic, and refuses a source
// already recorded with another topic. The inbox's consumer is "webhook/" + source, and the
// outbox message ID MessageID(source, tenant, id): keying them on the topic too would let
// deliveries already remembered under the old keys through again after an upgrade, under new
// message IDs that consumers would not deduplicate; so the handler refuses instead. Handlers in
// other processes are found through the database, by claimInDatabase.
func claimInProcess(db *pgxpool.Pool, schema, source, topic string) error {
	c := db.Config().ConnConfig
	key := endpointKey{host: c.Host, port: c.Port, database: c.Database, schema: schema, source: source}
	endpoints.Lock()
	defer endpoints.Unlock()
	if other, ok := endpoints.topics[key]; ok && other != topic {
		return &ConfigError{Field: "HandlerConfig.Topic", Problem: topicConflict(source, other, topic)}
	}
	endpoints.topics[key] = topic
	return nil
}

// ErrTopicConflict is the error of a handler whose Source is recorded in the database with
// another Topic (a handler of another process, or of an earlier deployment, took it first). The
// handler answers every delivery 500, storing nothing, so that the provider retries until the
// conflict is resolved; its log says how.
var ErrTopicConflict = errors.New("webhook source already goes to another topic")

// claimInDatabase records, in the schema's webhook_endpoints, that source's deliveries go to
// topic, unless a handler recorded another topic first: then it returns ErrTopicConflict.
//
// The INSERT waits for a concurrent first claim of the source to end, and then does nothing; the
// SELECT after it is a statement of its own, whose snapshot sees that claim committed.
func claimInDatabase(ctx context.Context, db *pgxpool.Pool, schemaName, source, topic string) error {
	table := pgx.Identifier{schemaName, "webhook_endpoints"}.Sanitize()
	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+table+" (source, topic) VALUES ($1, $2) ON CONFLICT (source) DO NOTHING", source, topic)
	var recorded string
	b.Queue("SELECT topic FROM "+table+" WHERE source = $1", source).QueryRow(func(row pgx.Row) error {
		return row.Scan(&recorded)
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("webhook: record the topic of source %q: %w", source, schema.Explain(err, schemaName))
	}
	if recorded != topic {
		return fmt.Errorf("%w: %s; if the source moved to topic %q for good, stop the handlers of topic %q and run UPDATE %s SET topic = '%s' WHERE source = '%s'",
			ErrTopicConflict, topicConflict(source, recorded, topic), topic, recorded, table, strings.ReplaceAll(topic, "'", "''"), source)
	}
	return nil
}

// topicConflict says why a second topic for source cannot work, and what to do.
func topicConflict(source, recorded, topic string) string {
	return fmt.Sprintf("Source %q already has a handler putting its deliveries under topic %q; deliveries are remembered per source, so every delivery one handler takes would be a duplicate to the other, and topic %q would never get it: give each endpoint a Source of its own, such as %q and %q",
		source, recorded, topic, source+"-billing", source+"-shipping")
}
