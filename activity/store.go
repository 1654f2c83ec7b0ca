package activity

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/engine"
)

// Defaults of the operator's side, applied by Config.WithDefaults and Purge.
const (
	// RetentionDefault is how long a finished receipt is kept. It must exceed the longest time
	// over which the same intent can be executed again: the activity's retry horizon
	// (ScheduleToClose), the workflow's own retries, and how far back operators may Reset a
	// workflow. Past it, the replay-horizon guard refuses to run the activity.
	RetentionDefault = 7 * 24 * time.Hour
	// PurgeBatchDefault is how many rows one Purge deletes when given a non-positive limit.
	PurgeBatchDefault = 1000
)

// Config configures a Store. The zero Config (or nil) is valid: WithDefaults returns a copy with
// every unset field set to its default, and Validate names the first invalid one. Its fields:
//
//   - Schema: the Postgres schema of the receipts table. Default "tempotent".
//   - Retention: how long finished receipts are kept. Default RetentionDefault (7 days); it must
//     exceed the workflows' retry and reset horizon.
//   - MaxPayloadBytes: the largest stored result; a larger one is a non-retryable
//     ErrTypePayloadTooLarge failure. Default 1 MiB.
//   - InProgressDelayMax: the cap of an in-progress duplicate's next-retry delay. Default 10 s.
//   - InProgressWait: how long a duplicate watches a live attempt's receipt before it gives up
//     with an InProgressError. Default a second; negative turns waiting off.
//   - LockTimeout and StatementTimeout: Postgres' lock_timeout and statement_timeout for each
//     receipt statement. Default 2 s and 5 s.
//   - DataConverter: encodes stored results; the worker client's conversion without its codecs.
//     Default converter.GetDefaultDataConverter().
//   - Codecs: encode stored results at rest (your encryption codec). Default none.
//   - FailureConverter: records final failures; the worker client's. Default
//     temporal.GetDefaultFailureConverter().
//   - MetricsHandler: the store's own gauges. Default client.MetricsNopHandler.
//   - Tracer: traces every receipt step (the telemetry package's Span names). Default none.
//
// The type is defined in the engine (internal/engine), where each field's comment says more.
type Config = engine.Config

// Store keeps receipts in Postgres. It is safe for concurrent use; create one per pool and
// share it.
type Store struct {
	eng *engine.Store
	db  *pgxpool.Pool
	cfg Config
	// registered remembers the names registered through this Store (Register).
	registered registrations
	operator
}

// NewStore returns a Store on db. It does not touch the database: call Migrate (or apply
// Migrations with your own tool) before the first call. A store whose table is missing fails
// every call with an error that says so. It refuses a Config that Config.Validate refuses.
func NewStore(db *pgxpool.Pool, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("activity.NewStore: db is nil; pass a *pgxpool.Pool")
	}
	eng, err := engine.NewStore(db, cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{eng: eng, db: db, cfg: eng.Config()}
	s.operator = newOperator(eng)
	return s, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }
