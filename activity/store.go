package activity

import (
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/engine"
)

// Config configures a Store. The zero Config (or nil) is valid: WithDefaults returns a copy with
// every unset field set to its default, and Validate names the first invalid one. Its fields:
//
//   - Schema: the Postgres schema of the receipts table. Default "tempotent".
//   - Retention: how long finished receipts are kept. Default 7 days (operator.RetentionDefault); it
//     must exceed the workflows' retry and reset horizon. Give the operator.Config that purges
//     these receipts the same.
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
//   - FingerprintKeys: key the request fingerprints receipts record (HMAC-SHA256), so that a
//     stored fingerprint confirms no guess of the request; the first key signs, all verify, and
//     so does the plain form of receipts recorded before (docs/keys.md). Default none.
//   - FailureConverter: records final failures; the worker client's. Default
//     temporal.GetDefaultFailureConverter().
//   - MetricsHandler: the metrics not tied to one activity: the worker's purger sends its count
//     of purged receipts and the unresolved gauges here. Default client.MetricsNopHandler.
//   - Tracer: traces every receipt step (the telemetry package's Span names). Default none.
//   - Authorize: the authorization hook, func(ctx, k keys.Key, tenant string) (allowed bool, err
//     error), asked before every attempt, first run or replay, on every path (Do, DoInNewTx,
//     DoInTx, Register, RegisterTx, ForEach's items) with the key and the caller's tenant
//     (keys.TenantFrom(ctx)): a key is not a bearer credential. false refuses with a
//     non-retryable UnauthorizedError, before anything is reserved, run or handed back; an error
//     (or a panic) is the hook's own failure, retryable. An activity's Options.Authorize (a
//     Call's Authorize; for ForEach's items Items.Options.Authorize, else the batch activity's)
//     takes precedence over it. Default none: no check.
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
	return &Store{eng: eng, db: db, cfg: eng.Config()}, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }
