package engine

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tempotent/tempotent/internal/schema"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
)

// Config configures a Store. The zero Config (or nil) is valid: WithDefaults fills every field.
type Config struct {
	// Schema is the Postgres schema of the receipts table. Default "tempotent".
	Schema string
	// Retention is how long finished receipts are kept; see RetentionDefault.
	Retention time.Duration
	// MaxPayloadBytes bounds a stored result; a larger one is a non-retryable
	// ErrTypePayloadTooLarge failure. Default 1 MiB: Temporal refuses payloads above 2 MiB by
	// default, and a smaller limit keeps receipts rows well clear of it.
	MaxPayloadBytes int
	// InProgressDelayMax caps the next-retry delay of an in-progress duplicate: the attempt that
	// holds the lease usually finishes long before its lease ends. Default 10 seconds.
	InProgressDelayMax time.Duration
	// InProgressWait is how long a duplicate that finds a live attempt watches its receipt
	// (reads backing off from 5 ms to 200 ms) before it gives up with an InProgressError: a
	// duplicate racing an attempt that finishes within it answers with that attempt's outcome,
	// a few milliseconds later, instead of a retry seconds later. Default a second; negative
	// turns waiting off.
	InProgressWait time.Duration
	// LockTimeout bounds how long a receipt statement waits for a row lock that another
	// transaction holds; the statement then fails with a retryable StoreError, or, for a
	// DoInNewTx whose duplicate holds the lock, an InProgressError. It also applies to the
	// statements of DoInNewTx's function, so that a duplicate never waits on an attempt that
	// stalled with its transaction open. Default 2 seconds (Postgres' lock_timeout, set for that
	// statement alone).
	LockTimeout time.Duration
	// StatementTimeout bounds how long one receipt statement may run. Default 5 seconds
	// (Postgres' statement_timeout, set for that statement alone).
	StatementTimeout time.Duration
	// DataConverter encodes results into the Temporal payloads that receipts store, and
	// decodes them for Do's caller. Give the worker client's payload conversion without its
	// codecs: a receipt returns the stored payload to the SDK, which applies the client's codecs
	// (encryption, compression) once on the way out; a payload already encoded by them would be
	// encoded twice. NewStore refuses a converter.CodecDataConverter for that reason; put its
	// codecs in Codecs to keep stored results encrypted too. Default
	// converter.GetDefaultDataConverter().
	DataConverter converter.DataConverter
	// Codecs, when set, encode the results a receipt stores (applied last to first, as
	// converter.NewCodecDataConverter does) and decode them when the receipt is replayed: give
	// your encryption codec to keep stored results encrypted at rest. Without it, the receipts
	// table holds results as the DataConverter made them, unencrypted.
	Codecs []converter.PayloadCodec
	// FingerprintKeys, when set, key the request fingerprints that receipts record
	// (HMAC-SHA256, see keys.Fingerprint.Keyed): a plain fingerprint is an unsalted hash of the
	// request, which anyone who reads it can confirm a guessed request against (an amount, an
	// email address). The first key signs; every key verifies, and so does the plain form, so
	// that receipts recorded before the key was turned on, or under an older key, still replay.
	// To rotate, put the new key first and keep the old ones for the Retention. Each key is at
	// least 16 random bytes (32 recommended). Default none: fingerprints are plain.
	FingerprintKeys [][]byte
	// FailureConverter records a final failure as a Temporal failure and turns it back into
	// the error a replay returns, with its type, message, details and cause. Use the same one
	// as the worker's client (client.Options.FailureConverter), so that a replayed failure's
	// details are encoded as the first execution's were. Failures are stored as it makes them:
	// the SDK's default converter does not apply the client's codecs to failure details.
	// Default temporal.GetDefaultFailureConverter().
	FailureConverter converter.FailureConverter
	// MetricsHandler receives the store's own gauges, those not tied to one activity (see
	// MetricUnresolvedHeld). Default client.MetricsNopHandler. Counters of an activity's
	// receipts go to that activity's metrics handler.
	MetricsHandler client.MetricsHandler
	// Tracer, when set, traces every receipt step (telemetry.SpanReserve, telemetry.SpanCall, telemetry.SpanComplete,
	// telemetry.SpanReplay) as a child of the span in the activity's context. Give the tracer of the SDK's
	// tracing interceptor (for OpenTelemetry, go.temporal.io/sdk/contrib/opentelemetry's
	// NewTracer), so that the steps sit under the activity's RunActivity span. Spans carry the
	// token and the operation, never the key or a payload.
	Tracer interceptor.Tracer
	// Authorize, when set, is asked before every attempt of every activity and call on this
	// store, first runs and replays alike, whether the caller's tenant may run the intent or be
	// handed its recorded result (see AuthorizeFunc): a key is not a bearer credential. An
	// activity's Options.Authorize (or a Call's) takes precedence over it. Nil: no check.
	Authorize AuthorizeFunc
	// TenantFences makes every receipt statement of the store check, in the same statement and
	// round trip, that its tenant has not moved away from this database (the table
	// tenant_fences, which shard.Move writes on the shard a tenant leaves; migration 012), and
	// fail, writing nothing, with Postgres' error SQLSTATE TT001 when it has (shard.AsMoved
	// reads it as a *shard.MovedError; the store's own errors wrap it, retryably). Set it on every store a shard.Router routes to:
	// NewRouter refuses a store without it, because without it a worker that was handed the old
	// shard's store before a move could write a receipt there after the move copied the
	// tenant's receipts. It costs each receipt statement one lookup of the tenant in a table of
	// one row per tenant that ever moved away, and no round trip. A batch of several tenants'
	// reservations or completions leaves a fenced tenant's row out and writes it alone, so that
	// only that tenant's call is refused. With it, receipt statements run only under READ
	// COMMITTED (any other level fails them with SQLSTATE 0A000, writing nothing: a snapshot
	// older than the statement may predate a fence the move did not wait for): begin the
	// transaction given to DoInTx at READ COMMITTED and keep the role's
	// default_transaction_isolation at read committed; DoInNewTx begins READ COMMITTED itself.
	// Default false: a store that is not sharded runs the statements it always did.
	TenantFences bool
}

// fences are the names the statements check fences by, or none.
func (c Config) fences() fences {
	if !c.TenantFences {
		return fences{}
	}
	return fences{table: pgx.Identifier{c.Schema, "tenant_fences"}.Sanitize(), refuse: pgx.Identifier{c.Schema, "tenant_moved"}.Sanitize(),
		isolation: pgx.Identifier{c.Schema, "tenant_fences_read_committed"}.Sanitize()}
}

// WithDefaults returns a copy of c (which may be nil) with every unset field set to its default.
func (c *Config) WithDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Schema = cmp.Or(out.Schema, "tempotent")
	out.FingerprintKeys = cloneKeys(out.FingerprintKeys)
	out.Retention = cmp.Or(out.Retention, schema.RetentionDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, 1<<20)
	out.InProgressDelayMax = cmp.Or(out.InProgressDelayMax, 10*time.Second)
	out.InProgressWait = cmp.Or(out.InProgressWait, time.Second)
	out.LockTimeout = cmp.Or(out.LockTimeout, 2*time.Second)
	out.StatementTimeout = cmp.Or(out.StatementTimeout, 5*time.Second)
	if out.DataConverter == nil {
		out.DataConverter = converter.GetDefaultDataConverter()
	}
	if out.FailureConverter == nil {
		out.FailureConverter = temporal.GetDefaultFailureConverter()
	}
	if out.MetricsHandler == nil {
		out.MetricsHandler = client.MetricsNopHandler
	}
	return out
}

// Validate reports the first invalid setting of c, once defaults are applied (WithDefaults):
// NewStore refuses a Config that Validate refuses, so a worker can check its configuration
// before it connects to anything.
func (c *Config) Validate() error {
	switch {
	case c.Retention < time.Minute:
		return fmt.Errorf("Config.Retention is %v; it must be at least a minute and should exceed the workflows' retry and reset horizon", c.Retention)
	case c.MaxPayloadBytes < 0:
		return fmt.Errorf("Config.MaxPayloadBytes is %d; it must not be negative", c.MaxPayloadBytes)
	case c.InProgressDelayMax < 0:
		return fmt.Errorf("Config.InProgressDelayMax is %v; it must not be negative", c.InProgressDelayMax)
	case len(c.Schema) > 63:
		return fmt.Errorf("Config.Schema %q is longer than Postgres' 63-byte identifier limit", c.Schema)
	case c.LockTimeout < time.Millisecond:
		return fmt.Errorf("Config.LockTimeout is %v; it must be at least a millisecond", c.LockTimeout)
	case c.StatementTimeout < time.Millisecond:
		return fmt.Errorf("Config.StatementTimeout is %v; it must be at least a millisecond", c.StatementTimeout)
	}
	if err := validateFingerprintKeys(c.FingerprintKeys); err != nil {
		return err
	}
	if _, ok := c.DataConverter.(*converter.CodecDataConverter); ok {
		return errors.New("Config.DataConverter is a codec data converter: give the converter it wraps and put its codecs in Config.Codecs. " +
			"The SDK applies the client's codecs to what a receipt returns; a stored payload encoded by them already would be encoded twice")
	}
	return nil
}

// Store keeps receipts in Postgres. It is safe for concurrent use; create one per pool and
// share it.
type Store struct {
	db *pgxpool.Pool
	// receipts is where the receipt statements of Do go: db itself, except in the exploration
	// test, which steps through them one at a time and injects faults between them.
	receipts     batcher
	cfg          Config
	sql          statements
	completions  *completions
	reservations *reservations
	// lockTimeout and statementTimeout are the settings' values in milliseconds, as
	// set_config takes them.
	lockTimeout, statementTimeout string
}

// NewStore returns a Store on db. It does not touch the database: call Migrate (or apply
// Migrations with your own tool) before the first call. A store whose table is missing fails
// every call with an error that says so.
func NewStore(db *pgxpool.Pool, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("activity.NewStore: db is nil; pass a *pgxpool.Pool")
	}
	c := cfg.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("activity.NewStore: %w", err)
	}
	s := &Store{
		db:               db,
		receipts:         db,
		cfg:              c,
		sql:              newStatements(pgx.Identifier{c.Schema, "receipts"}.Sanitize(), c.fences()),
		lockTimeout:      strconv.FormatInt(c.LockTimeout.Milliseconds(), 10),
		statementTimeout: strconv.FormatInt(c.StatementTimeout.Milliseconds(), 10),
	}
	s.completions = &completions{store: s}
	s.reservations = &reservations{store: s}
	return s, nil
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// table is the receipts table, quoted.
func (s *Store) table() string { return schema.ReceiptsTable(s.cfg.Schema) }
