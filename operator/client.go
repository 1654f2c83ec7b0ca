package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/internal/schema"
)

// Defaults applied by Config.WithDefaults. Those the activity package has too are the same
// values, so that a Client given the zero Config agrees with a worker given the zero
// activity.Config.
const (
	// SchemaDefault is the Postgres schema that holds the receipts table.
	SchemaDefault = "tempotent"
	// RetentionDefault is how long a finished receipt is kept. It must exceed the longest time
	// over which the same intent can be executed again: the activity's retry horizon
	// (ScheduleToClose), the workflow's own retries, and how far back operators may Reset a
	// workflow. Past it, the replay-horizon guard refuses to run the activity.
	RetentionDefault = 7 * 24 * time.Hour
	// MaxPayloadBytesDefault bounds the result that Resolve records, as it bounds an activity's.
	MaxPayloadBytesDefault = 1 << 20
	// PurgeBatchDefault is how many rows one Purge deletes when given a non-positive limit.
	PurgeBatchDefault = 1000
	// LockTimeoutDefault bounds how long a statement that writes receipts waits for a row or
	// table lock held elsewhere (Postgres' lock_timeout, set for that statement alone).
	LockTimeoutDefault = 2 * time.Second
	// StatementTimeoutDefault bounds how long one such statement may run (Postgres'
	// statement_timeout, set for that statement alone).
	StatementTimeoutDefault = 5 * time.Second
)

// Config configures a Client. The zero Config is valid: WithDefaults fills every field. Give the
// settings the workers' activity.Config has where both have them (Schema, Retention,
// DataConverter, Codecs, MaxPayloadBytes): receipts are read and written as the workers wrote
// them.
type Config struct {
	// Schema is the Postgres schema of the receipts table. Default SchemaDefault.
	Schema string
	// Retention is how long a receipt is kept once an operator settled it (Resolve) or re-armed
	// it (Rearm), and, on a partitioned table, how long after a day ended Purge may retire it (a
	// day's grace added). Give the workers' activity.Config.Retention. Default RetentionDefault.
	Retention time.Duration
	// DataConverter encodes Resolution.Result into the payload the receipt stores, as the
	// workers' activity.Config.DataConverter encodes an activity's result. Like it, it must not be
	// a converter.CodecDataConverter: put its codecs in Codecs. Default
	// converter.GetDefaultDataConverter().
	DataConverter converter.DataConverter
	// Codecs are the workers' activity.Config.Codecs: Receipt, Receipts and Resolve decode
	// stored results with them (so that Receipt.Result and ResultText show what the activity
	// returned, not ciphertext), and Resolve seals the result it records with them, so that an
	// operator's result is not the one kept in cleartext at rest. Without them, a result stored
	// sealed is shown by its encoding and size.
	Codecs []converter.PayloadCodec
	// MaxPayloadBytes bounds the result Resolve records. Default MaxPayloadBytesDefault.
	MaxPayloadBytes int
	// LockTimeout bounds how long a statement that writes receipts (Resolve, Rearm, Purge;
	// Partition's schema changes) or records a maintenance run (RecordMaintenanceRun) waits for
	// a lock held elsewhere, so that it never queues receipt statements behind it for long.
	// Default LockTimeoutDefault.
	LockTimeout time.Duration
	// StatementTimeout bounds how long one such statement may run. Default
	// StatementTimeoutDefault.
	StatementTimeout time.Duration
	// MetricsHandler receives the gauges of unresolved receipts that Purge updates
	// (MetricUnresolved, MetricUnresolvedOldest, MetricUnresolvedHeld). Default
	// client.MetricsNopHandler.
	MetricsHandler client.MetricsHandler
}

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, MaxPayloadBytesDefault)
	c.LockTimeout = cmp.Or(c.LockTimeout, LockTimeoutDefault)
	c.StatementTimeout = cmp.Or(c.StatementTimeout, StatementTimeoutDefault)
	if c.DataConverter == nil {
		c.DataConverter = converter.GetDefaultDataConverter()
	}
	if c.MetricsHandler == nil {
		c.MetricsHandler = client.MetricsNopHandler
	}
	return c
}

// ConfigError is NewClient's error, and Validate's, for a Config setting it refuses: Field names
// the setting, and Problem says what is wrong with it and what it must be.
type ConfigError struct {
	Field, Problem string
}

func (e *ConfigError) Error() string { return "operator.Config." + e.Field + " " + e.Problem }

// Validate reports the first invalid setting of c, once defaults are applied (WithDefaults), as
// a *ConfigError.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(c.Schema) > 63:
		return bad("Schema", "%q is longer than Postgres' 63-byte identifier limit", c.Schema)
	case c.Retention < time.Minute:
		return bad("Retention", "is %v; it must be at least a minute, and should be the workers' activity.Config.Retention", c.Retention)
	case c.MaxPayloadBytes < 0:
		return bad("MaxPayloadBytes", "is %d; it must not be negative", c.MaxPayloadBytes)
	case c.LockTimeout < time.Millisecond:
		return bad("LockTimeout", "is %v; it must be at least a millisecond", c.LockTimeout)
	case c.StatementTimeout < time.Millisecond:
		return bad("StatementTimeout", "is %v; it must be at least a millisecond", c.StatementTimeout)
	}
	if _, ok := c.DataConverter.(*converter.CodecDataConverter); ok {
		return bad("DataConverter", "is a codec data converter: give the converter it wraps and put its codecs in Config.Codecs, "+
			"as the workers' activity.Config does; a result sealed by it and by Codecs would be encoded twice")
	}
	return nil
}

// Client is what an operator does with receipts, without SQL: list and read them, settle an
// unknown outcome, re-arm a failure, count them, purge them, and partition their table. It is
// safe for concurrent use. It keeps nothing in memory: any number of Clients, in any number of
// processes, may act on the same schema as the workers do.
type Client struct {
	db  *pgxpool.Pool
	cfg Config
	// receipts, audit and runs (maintenance_runs) are the tables, quoted.
	receipts, audit, runs string
	// lockTimeout and statementTimeout are the settings in milliseconds, as set_config takes
	// them.
	lockTimeout, statementTimeout string
}

// NewClient returns a Client on db's receipts, in cfg.Schema. It does not touch the database: a
// schema without tempotent's tables fails each call with an error that matches
// activity.ErrNotMigrated. Its error for a Config it refuses is a *ConfigError.
func NewClient(db *pgxpool.Pool, cfg Config) (*Client, error) {
	if db == nil {
		return nil, errors.New("operator.NewClient: db is nil; pass a *pgxpool.Pool")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("operator.NewClient: %w", err)
	}
	return &Client{
		db:               db,
		cfg:              cfg,
		receipts:         schema.ReceiptsTable(cfg.Schema),
		audit:            schema.AuditTable(cfg.Schema),
		runs:             pgx.Identifier{cfg.Schema, "maintenance_runs"}.Sanitize(),
		lockTimeout:      strconv.FormatInt(cfg.LockTimeout.Milliseconds(), 10),
		statementTimeout: strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10),
	}, nil
}

// Config returns the client's configuration with defaults applied.
func (c *Client) Config() Config { return c.cfg }

// settings go in the same round trip and implicit transaction as each statement that writes
// receipts (timed), local to that transaction: a lock wait or a stuck statement fails after the
// client's timeouts, instead of holding up the workers' receipt statements queued behind it. $1
// and $2 are in milliseconds.
const settings = `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`

// bounded is ctx with a deadline of StatementTimeout and a second: for the statements whose
// waits the settings cannot bound (see timed), and the point reads (Receipt, Audit) that
// Resolve and Rearm make before they write. Listing and stats are left to the caller's ctx: a
// scan of a large table may rightly take longer.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.StatementTimeout+time.Second)
}

// timed sends stmt behind settings, in one round trip, and hands its result to read. The
// settings cannot bound everything: pgx prepares a batch's statements before it runs the first
// one, and preparing takes the table's lock, so a statement that meets the table locked by DDL
// (a migration, a partition's conversion) waits there with no lock_timeout yet in force. A
// deadline of StatementTimeout and a second bounds it from this side, as the engine's receipt
// statements are bounded (TestTimedStatementsGiveUpBehindATableLock).
func (c *Client) timed(ctx context.Context, stmt string, args []any, read func(pgx.BatchResults) error) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(settings, c.lockTimeout, c.statementTimeout)
	b.Queue(stmt, args...)
	res := c.db.SendBatch(ctx, b)
	_, err := res.Exec()
	if err == nil {
		err = read(res)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}

// exec runs stmt under the client's timeouts.
func (c *Client) exec(ctx context.Context, stmt string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := c.timed(ctx, stmt, args, func(res pgx.BatchResults) error {
		var err error
		tag, err = res.Exec()
		return err
	})
	return tag, err
}

// scanTimed runs stmt under the client's timeouts and scans its one row into dest.
func (c *Client) scanTimed(ctx context.Context, stmt string, args []any, dest ...any) error {
	return c.timed(ctx, stmt, args, func(res pgx.BatchResults) error { return res.QueryRow().Scan(dest...) })
}

// explain turns a missing table into an error that matches activity.ErrNotMigrated, with what to
// do.
func (c *Client) explain(err error) error { return schema.Explain(err, c.cfg.Schema) }
