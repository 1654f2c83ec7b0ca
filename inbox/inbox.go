package inbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/errtype"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/telemetry"
)

// Defaults applied by New.
const (
	// SchemaDefault is the Postgres schema of the inbox table: the receipts' schema.
	SchemaDefault = "tempotent"
	// RetentionDefault is how long a processed message's record is kept. It must exceed the
	// longest time over which the producer can deliver the same message again (its outbox
	// retention and dispatch horizon, a webhook provider's retry schedule, an operator's
	// replay): a duplicate that arrives after its record is pruned runs again.
	RetentionDefault = 7 * 24 * time.Hour
	// LockTimeoutDefault bounds how long a duplicate waits for a concurrent delivery of the same
	// message to commit or roll back before it gets an InProgressError.
	LockTimeoutDefault = 2 * time.Second
	// PurgeBatchDefault is how many records one Purge deletes when given a non-positive limit.
	PurgeBatchDefault = 1000
)

// Metric names, counted through Config.Metrics with the tag "consumer" (telemetry.MetricTagConsumer).
// They are the telemetry package's, which names every metric of the toolkit.
const (
	MetricProcessed  = telemetry.InboxProcessed  // a message ran and committed
	MetricDuplicate  = telemetry.InboxDuplicate  // a message processed before, acknowledged without running
	MetricInProgress = telemetry.InboxInProgress // a concurrent duplicate gave up waiting
	MetricMismatched = telemetry.InboxMismatched // a processed ID came again with another payload
)

// Temporal application error types of the errors below. Process and Claim return them as
// Temporal application errors of these types (errors.Is and errors.As still find ErrInProgress,
// ErrMismatch and *InProgressError in them), so that a consumer running in an activity can
// return them as they are: in-progress is retried, a mismatch is not. Once an error has crossed
// into Temporal, match it by its type.
const (
	ErrTypeInProgress = errtype.InboxInProgress // retryable
	ErrTypeMismatch   = errtype.InboxMismatch   // non-retryable
)

// Errors, matched with errors.Is.
var (
	// ErrInProgress: another delivery of this message is being processed right now; retry
	// later. Nothing ran.
	ErrInProgress = errors.New("inbox: message is being processed by a concurrent delivery")
	// ErrMismatch: this consumer processed a message with this ID and another payload. Nothing
	// ran: the producer reused an ID, or the message was altered.
	ErrMismatch = errors.New("inbox: message ID reused with another payload")
)

// ErrNotMigrated is migrate.ErrNotMigrated: the inbox table is missing; apply tempotent's
// migrations (migrate.Up).
//
// Deprecated: match migrate.ErrNotMigrated, the one name of this error; removed in the release
// after next.
var ErrNotMigrated = migrate.ErrNotMigrated

// Config configures an Inbox.
type Config struct {
	// Consumer names the consumer: each consumer processes a message once, independently of
	// the others. Required.
	Consumer string
	// Schema is the Postgres schema of the inbox table (tempotent's migrations create it:
	// migrate.Up).
	// Default SchemaDefault.
	Schema string
	// Retention is how long processed records are kept; see RetentionDefault.
	Retention time.Duration
	// LockTimeout: see LockTimeoutDefault.
	LockTimeout time.Duration
	// Metrics receives the Metric counters. Default: none.
	Metrics client.MetricsHandler
}

// Inbox processes each message once per consumer: the record that the message was processed
// and the consumer's own writes commit in one transaction, or neither does.
type Inbox struct {
	db    *pgxpool.Pool
	cfg   Config
	table string
	met   client.MetricsHandler
}

// New returns the inbox of cfg.Consumer on db.
func New(db *pgxpool.Pool, cfg Config) (*Inbox, error) {
	if db == nil {
		return nil, errors.New("inbox.New: db is nil; pass a *pgxpool.Pool")
	}
	if cfg.Consumer == "" {
		return nil, errors.New("inbox.New: Config.Consumer is empty; name the consumer (messages are processed once per consumer)")
	}
	cfg.Schema = cmp.Or(cfg.Schema, SchemaDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.LockTimeout = cmp.Or(cfg.LockTimeout, LockTimeoutDefault)
	if cfg.Retention < 0 || cfg.LockTimeout < 0 {
		return nil, errors.New("inbox.New: Retention and LockTimeout must be positive, or 0 for the default")
	}
	met := cmp.Or[client.MetricsHandler](cfg.Metrics, client.MetricsNopHandler)
	return &Inbox{
		db: db, cfg: cfg, table: pgx.Identifier{cfg.Schema, "inbox"}.Sanitize(),
		met: met.WithTags(map[string]string{telemetry.MetricTagConsumer: cfg.Consumer}),
	}, nil
}

// Message is what the inbox needs of a message: its ID, and its payload when the consumer wants
// a reused ID with another payload refused (nil skips that check).
type Message struct {
	ID      string
	Payload []byte
}

// Process runs fn in a new transaction, once per message ID for this consumer, and reports
// whether it ran. A duplicate of a message already processed is acknowledged without running
// (false, nil). A duplicate that arrives while another delivery of the message is processing
// waits for it to finish, up to Config.LockTimeout, and then gets an *InProgressError. If fn
// fails, or the commit does, nothing is recorded and the message can be processed again.
func (i *Inbox) Process(ctx context.Context, m Message, fn func(ctx context.Context, tx pgx.Tx) error) (ran bool, err error) {
	err = pgx.BeginFunc(ctx, i.db, func(tx pgx.Tx) error {
		first, err := i.Claim(ctx, tx, m)
		if err != nil || !first {
			return err
		}
		if err := fn(ctx, tx); err != nil {
			return err
		}
		ran = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if ran {
		i.met.Counter(MetricProcessed).Inc(1)
	}
	return ran, nil
}

// Claim records m as processed in the caller's transaction tx and reports whether this is its
// first processing: run the consumer's writes in tx only when it is, and commit. A concurrent
// delivery of m waits on this one until tx ends. Use Claim when the consumer owns its
// transaction; Process does all of it.
func (i *Inbox) Claim(ctx context.Context, tx pgx.Tx, m Message) (first bool, err error) {
	if m.ID == "" {
		return false, errors.New("inbox: Message.ID is empty; the producer's message ID is what the inbox deduplicates on")
	}
	var digest []byte
	if m.Payload != nil {
		sum := sha256.Sum256(m.Payload)
		digest = sum[:]
	}
	// The INSERT waits on a concurrent delivery's uncommitted row: it conflicts when that one
	// commits, and inserts when it rolls back. lock_timeout bounds the wait; a savepoint keeps
	// the caller's transaction usable after it.
	// One round trip: the transaction's own lock_timeout is kept in a setting of ours while the
	// INSERT runs under the inbox's, and put back before the savepoint is released.
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT tempotent_inbox")
	b.Queue("SELECT set_config('tempotent.inbox_saved_lock_timeout', current_setting('lock_timeout'), true)")
	b.Queue("SELECT set_config('lock_timeout', $1, true)", lockTimeout(i.cfg.LockTimeout))
	b.Queue(`INSERT INTO `+i.table+` (consumer, message_id, digest) VALUES ($1, $2, $3)
		ON CONFLICT (consumer, message_id) DO NOTHING`, i.cfg.Consumer, m.ID, digest)
	b.Queue("SELECT set_config('lock_timeout', current_setting('tempotent.inbox_saved_lock_timeout'), true)")
	b.Queue("RELEASE SAVEPOINT tempotent_inbox")
	results := tx.SendBatch(ctx, b)
	var inserted bool
	for n := range 6 {
		tag, execErr := results.Exec()
		if execErr != nil {
			err = execErr
			break
		}
		if n == 3 {
			inserted = tag.RowsAffected() == 1
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		// Also undoes the lock_timeout.
		if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT tempotent_inbox"); rbErr != nil {
			return false, fmt.Errorf("inbox: claim %s: %w (and rolling back to the savepoint: %v)", m.ID, err, rbErr)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			i.met.Counter(MetricInProgress).Inc(1)
			e := &InProgressError{Consumer: i.cfg.Consumer, ID: m.ID, Waited: i.cfg.LockTimeout}
			return false, temporal.NewApplicationErrorWithOptions(e.Error(), ErrTypeInProgress, temporal.ApplicationErrorOptions{Cause: e})
		}
		return false, fmt.Errorf("inbox: claim %s: %w", m.ID, schema.Explain(err, i.cfg.Schema))
	}
	if inserted {
		return true, nil
	}
	var stored []byte
	if err := tx.QueryRow(ctx, "SELECT digest FROM "+i.table+" WHERE consumer = $1 AND message_id = $2", i.cfg.Consumer, m.ID).Scan(&stored); err != nil {
		return false, fmt.Errorf("inbox: claim %s: read its record: %w", m.ID, err)
	}
	if digest != nil && stored != nil && !bytes.Equal(stored, digest) {
		i.met.Counter(MetricMismatched).Inc(1)
		err := fmt.Errorf("%w: consumer %q processed %q with another payload; nothing ran", ErrMismatch, i.cfg.Consumer, m.ID)
		return false, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeMismatch, err)
	}
	i.met.Counter(MetricDuplicate).Inc(1)
	return false, nil
}

// lockTimeout renders d for Postgres' lock_timeout in whole milliseconds, rounded up: "0ms"
// would mean no timeout at all.
func lockTimeout(d time.Duration) string {
	return fmt.Sprintf("%dms", max((d+time.Millisecond-1)/time.Millisecond, 1))
}

// InProgressError reports that a concurrent delivery of the message held it for longer than the
// lock timeout. Retry later; nothing ran.
type InProgressError struct {
	Consumer, ID string
	Waited       time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("inbox: consumer %q: message %q is being processed by a concurrent delivery (waited %s); retry later", e.Consumer, e.ID, e.Waited)
}

// Is matches ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// Purge deletes up to limit records of this consumer older than its retention (limit <= 0 means
// PurgeBatchDefault) and returns how many it deleted. A worker started with package worker
// purges the records of every consumer itself (worker.Config.InboxRetention); call Purge when
// yours does not.
func (i *Inbox) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	tag, err := i.db.Exec(ctx, purgeStatement(i.table), i.cfg.Consumer, i.cfg.Retention.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("inbox: purge: %w", err)
	}
	return tag.RowsAffected(), nil
}

// purgeStatement deletes up to $3 records of consumer $1 older than $2 microseconds from table.
// It finds them by the index of processing times alone: the consumer is compared with an empty
// string appended to it, so that the planner cannot look it up in the primary key. Without
// statistics (a table never analyzed: a new one, or any after pg_upgrade, which carries none
// over) the planner combined the two, reading every record of the consumer at every purge: 1,897
// buffers among 300,000 records, none expired, against 2. With statistics it takes the
// processing times' index alone, as it now must. TestPurgeFindsRecordsByTheirAge.
func purgeStatement(table string) string {
	return `DELETE FROM ` + table + ` WHERE (consumer, message_id) IN (
			SELECT consumer, message_id FROM ` + table + `
			WHERE (consumer || '') = $1 AND processed_at < now() - $2::bigint * interval '1 microsecond'
			LIMIT $3
			FOR UPDATE SKIP LOCKED)`
}

// Check reports whether the inbox's schema has its table; its error says how to create it.
func (i *Inbox) Check(ctx context.Context) error {
	if err := migrate.Check(ctx, i.db, i.cfg.Schema); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	return nil
}
