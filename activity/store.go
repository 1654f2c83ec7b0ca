package activity

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/converter"
)

// Defaults applied by Config.WithDefaults.
const (
	// SchemaDefault is the Postgres schema that holds the receipts table.
	SchemaDefault = "tempotent"
	// RetentionDefault is how long a finished receipt is kept. It must exceed the longest time
	// over which the same intent can be executed again: the activity's retry horizon
	// (ScheduleToClose), the workflow's own retries, and how far back operators may Reset a
	// workflow. Past it, the replay-horizon guard refuses to run the activity.
	RetentionDefault = 7 * 24 * time.Hour
	// MaxPayloadBytesDefault bounds a stored result. Temporal refuses payloads above 2 MiB by
	// default; a smaller limit keeps receipts rows well clear of it.
	MaxPayloadBytesDefault = 1 << 20
	// LeaseDefault is the lease taken when the context has no deadline (Do and DoTx called
	// outside an activity without Call.Lease). Activities lease until their own deadline.
	LeaseDefault = time.Minute
	// InProgressDelayMaxDefault caps the retry delay of an InProgressError: the attempt that
	// holds the lease usually finishes long before its lease ends.
	InProgressDelayMaxDefault = 10 * time.Second
	// InProgressWaitDefault is how long a duplicate waits in process for a live attempt to
	// finish before it gives up with an InProgressError.
	InProgressWaitDefault = time.Second
	// PurgeBatchDefault is how many rows one Purge deletes when given a non-positive limit.
	PurgeBatchDefault = 1000
)

// Config configures a Store. The zero Config (or nil) is valid: WithDefaults fills every field.
type Config struct {
	// Schema is the Postgres schema of the receipts table. Default SchemaDefault.
	Schema string
	// Retention is how long finished receipts are kept; see RetentionDefault.
	Retention time.Duration
	// MaxPayloadBytes bounds a stored result; a larger one is a non-retryable
	// ErrTypePayloadTooLarge failure. Default MaxPayloadBytesDefault.
	MaxPayloadBytes int
	// InProgressDelayMax caps the next-retry delay of an in-progress duplicate.
	InProgressDelayMax time.Duration
	// InProgressWait is how long a duplicate that finds a live attempt watches its receipt
	// (reads backing off from 5 ms to 200 ms) before it gives up with an InProgressError: a
	// duplicate racing an attempt that finishes within it answers with that attempt's outcome,
	// a few milliseconds later, instead of a retry seconds later. Default InProgressWaitDefault;
	// negative turns waiting off.
	InProgressWait time.Duration
	// DataConverter encodes results into the Temporal payloads that receipts store. Use the
	// same converter as the worker's client. Default converter.GetDefaultDataConverter().
	DataConverter converter.DataConverter
}

// WithDefaults returns a copy of c (which may be nil) with every unset field set to its default.
func (c *Config) WithDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Schema = cmp.Or(out.Schema, SchemaDefault)
	out.Retention = cmp.Or(out.Retention, RetentionDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	out.InProgressDelayMax = cmp.Or(out.InProgressDelayMax, InProgressDelayMaxDefault)
	out.InProgressWait = cmp.Or(out.InProgressWait, InProgressWaitDefault)
	if out.DataConverter == nil {
		out.DataConverter = converter.GetDefaultDataConverter()
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Retention < time.Minute:
		return fmt.Errorf("Config.Retention is %v; it must be at least a minute and should exceed the workflows' retry and reset horizon", c.Retention)
	case c.MaxPayloadBytes < 0:
		return fmt.Errorf("Config.MaxPayloadBytes is %d; it must not be negative", c.MaxPayloadBytes)
	case c.InProgressDelayMax < 0:
		return fmt.Errorf("Config.InProgressDelayMax is %v; it must not be negative", c.InProgressDelayMax)
	case len(c.Schema) > 63:
		return fmt.Errorf("Config.Schema %q is longer than Postgres' 63-byte identifier limit", c.Schema)
	}
	return nil
}

// Store keeps receipts in Postgres. It is safe for concurrent use; create one per pool and
// share it.
type Store struct {
	db          *pgxpool.Pool
	cfg         Config
	sql         statements
	completions *completions
}

// NewStore returns a Store on db. It does not touch the database: call Migrate (or apply
// Migrations with your own tool) before the first call. A store whose table is missing fails
// every call with an error that says so.
func NewStore(db *pgxpool.Pool, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("activity.NewStore: db is nil; pass a *pgxpool.Pool")
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("activity.NewStore: %w", err)
	}
	s := &Store{db: db, cfg: c, sql: newStatements(pgx.Identifier{c.Schema, "receipts"}.Sanitize())}
	s.completions = &completions{store: s}
	return s, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }
