package worker

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/activity"
)

// Defaults applied by Config.WithDefaults.
const (
	NamespaceDefault     = "default"
	TaskQueueDefault     = "tempotent-payments"
	ShutdownGraceDefault = 30 * time.Second
	// PurgeEveryDefault is how often a worker purges expired receipts and inbox records (see
	// Config.PurgeEvery).
	PurgeEveryDefault = 10 * time.Minute
	// InboxRetentionDefault is how long the worker keeps inbox records (see
	// Config.InboxRetention): 30 days, the longest of the defaults of the records' owners,
	// webhook.RetentionDefault (inbox.RetentionDefault is 7 days). A literal, so that go doc
	// shows it; TestInboxRetentionDefault ties it to theirs.
	InboxRetentionDefault = 30 * 24 * time.Hour
	TemporalCLIDefault    = "bin/temporal"
	DataDirDefault        = ".tmp"
)

// Config is what a tempotent worker needs. Every field can come from a flag and from the
// environment (the flag wins); the zero Config starts everything it needs locally.
type Config struct {
	// TemporalAddress is the Temporal frontend (host:port). Empty starts the Temporal dev
	// server from TemporalCLI, with its Web UI. Env TEMPORAL_ADDRESS.
	TemporalAddress string
	// Namespace is the Temporal namespace. Env TEMPORAL_NAMESPACE; default NamespaceDefault.
	Namespace string
	// TaskQueue is the task queue the worker polls. Env TEMPOTENT_TASK_QUEUE.
	TaskQueue string
	// DatabaseURL is the Postgres that holds the receipts. Empty uses the local Postgres on
	// 127.0.0.1:5432 if it answers, else a throwaway cluster in DataDir. Env DATABASE_URL.
	DatabaseURL string
	// Receipts configures the receipt store, validated by activity.Config.Validate. Its
	// Schema, Retention and MaxPayloadBytes have flags and environment variables:
	// TEMPOTENT_SCHEMA, TEMPOTENT_RETENTION, TEMPOTENT_MAX_PAYLOAD_BYTES.
	Receipts activity.Config
	// Migrate applies tempotent's migrations (migrate.Up: receipts, outbox, inbox) to
	// Receipts.Schema at start. Env TEMPOTENT_MIGRATE=1. Either way, Start then checks the
	// schema (migrate.Check) and refuses one that lacks migrations.
	Migrate bool
	// LogLevel is debug, info, warn or error. Env TEMPOTENT_LOG_LEVEL.
	LogLevel string
	// ShutdownGrace is how long running activities may take to finish after SIGINT or
	// SIGTERM. Env TEMPOTENT_SHUTDOWN_GRACE.
	ShutdownGrace time.Duration
	// PurgeEvery is how often the worker deletes receipts past their retention
	// (operator.Client.Purge, in bounded batches) and then inbox records past InboxRetention
	// (operator.Client.PurgeInbox), give or take a fifth at random so that workers
	// started together do not purge together; one worker at a time does it, under an advisory
	// lock. Negative turns it off (purge from a job of your own). Env TEMPOTENT_PURGE_EVERY;
	// default PurgeEveryDefault.
	PurgeEvery time.Duration
	// InboxRetention is how long the worker's purge rounds keep the schema's inbox records:
	// those of every inbox.Inbox consumer, and the delivery IDs every webhook.Handler remembers.
	// A record stores when it was processed, not its consumer's retention, so this must be at
	// least the longest inbox.Config.Retention and webhook.HandlerConfig.Retention in use on the
	// schema: a record purged sooner lets a duplicate of its message run again. Negative turns
	// off the worker's purging of inbox records (call each Inbox's or Handler's Purge yourself).
	// Env TEMPOTENT_INBOX_RETENTION; default InboxRetentionDefault.
	InboxRetention time.Duration
	// TemporalCLI is the temporal binary for the dev server (make bin/temporal installs it).
	// Env TEMPORAL_CLI.
	TemporalCLI string
	// DataDir holds what local mode creates: the throwaway Postgres cluster. Env
	// TEMPOTENT_DATA_DIR.
	DataDir string

	envErrs []error // bad environment values met by Bind, reported by Validate
}

// Bind registers c's flags on fs, with defaults from the environment.
func (c *Config) Bind(fs *flag.FlagSet) {
	env := os.Getenv
	fs.StringVar(&c.TemporalAddress, "temporal-address", env("TEMPORAL_ADDRESS"), "Temporal frontend host:port; empty starts the dev server (env TEMPORAL_ADDRESS)")
	fs.StringVar(&c.Namespace, "namespace", cmp.Or(env("TEMPORAL_NAMESPACE"), NamespaceDefault), "Temporal namespace (env TEMPORAL_NAMESPACE)")
	fs.StringVar(&c.TaskQueue, "task-queue", cmp.Or(env("TEMPOTENT_TASK_QUEUE"), TaskQueueDefault), "task queue to poll (env TEMPOTENT_TASK_QUEUE)")
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL"), "Postgres URL for the receipts; empty uses 127.0.0.1:5432 or a throwaway cluster (env DATABASE_URL)")
	fs.StringVar(&c.Receipts.Schema, "schema", cmp.Or(env("TEMPOTENT_SCHEMA"), new(activity.Config).WithDefaults().Schema), "Postgres schema of the receipts (env TEMPOTENT_SCHEMA)")
	fs.Func("retention", "how long finished receipts are kept, e.g. 168h (env TEMPOTENT_RETENTION)", durationFlag(&c.Receipts.Retention))
	fs.Func("max-payload-bytes", "largest result a receipt stores (env TEMPOTENT_MAX_PAYLOAD_BYTES)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("not a positive number of bytes: %q", v)
		}
		c.Receipts.MaxPayloadBytes = n
		return nil
	})
	fs.BoolVar(&c.Migrate, "migrate", env("TEMPOTENT_MIGRATE") == "1", "apply tempotent's migrations at start (env TEMPOTENT_MIGRATE=1)")
	fs.StringVar(&c.LogLevel, "log-level", cmp.Or(env("TEMPOTENT_LOG_LEVEL"), "info"), "debug, info, warn or error (env TEMPOTENT_LOG_LEVEL)")
	fs.Func("shutdown-grace", "how long running activities may finish after SIGINT/SIGTERM (env TEMPOTENT_SHUTDOWN_GRACE)", durationFlag(&c.ShutdownGrace))
	fs.Func("purge-every", "how often expired receipts and inbox records are purged, e.g. 10m; negative turns it off (env TEMPOTENT_PURGE_EVERY)", durationFlag(&c.PurgeEvery))
	fs.Func("inbox-retention", "how long purging keeps inbox and webhook records, e.g. 720h; at least every consumer's Retention; negative turns it off (env TEMPOTENT_INBOX_RETENTION)", durationFlag(&c.InboxRetention))
	fs.StringVar(&c.TemporalCLI, "temporal-cli", cmp.Or(env("TEMPORAL_CLI"), TemporalCLIDefault), "temporal binary for the dev server (env TEMPORAL_CLI)")
	fs.StringVar(&c.DataDir, "data-dir", cmp.Or(env("TEMPOTENT_DATA_DIR"), DataDirDefault), "folder for local mode's throwaway Postgres (env TEMPOTENT_DATA_DIR)")
	// Environment values of the duration flags are parsed here so that a bad one is reported
	// like a bad flag.
	for name, v := range map[string]string{"retention": env("TEMPOTENT_RETENTION"), "shutdown-grace": env("TEMPOTENT_SHUTDOWN_GRACE"), "max-payload-bytes": env("TEMPOTENT_MAX_PAYLOAD_BYTES"), "purge-every": env("TEMPOTENT_PURGE_EVERY"), "inbox-retention": env("TEMPOTENT_INBOX_RETENTION")} {
		if v != "" {
			if err := fs.Set(name, v); err != nil {
				c.envErrs = append(c.envErrs, fmt.Errorf("environment: %s=%q: %w", envName(name), v, err))
			}
		}
	}
}

func envName(flagName string) string {
	return "TEMPOTENT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func durationFlag(d *time.Duration) func(string) error {
	return func(s string) error {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("not a duration (use e.g. 30s, 168h): %q", s)
		}
		*d = v
		return nil
	}
}

// WithDefaults returns c with unset fields set.
func (c Config) WithDefaults() Config {
	c.Namespace = cmp.Or(c.Namespace, NamespaceDefault)
	c.TaskQueue = cmp.Or(c.TaskQueue, TaskQueueDefault)
	c.Receipts = c.Receipts.WithDefaults()
	c.LogLevel = cmp.Or(c.LogLevel, "info")
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.PurgeEvery = cmp.Or(c.PurgeEvery, PurgeEveryDefault)
	c.InboxRetention = cmp.Or(c.InboxRetention, InboxRetentionDefault)
	c.TemporalCLI = cmp.Or(c.TemporalCLI, TemporalCLIDefault)
	c.DataDir = cmp.Or(c.DataDir, DataDirDefault)
	return c
}

// Validate reports every bad value at once, each with what to do about it.
func (c Config) Validate() error {
	errs := append([]error(nil), c.envErrs...)
	if _, err := c.level(); err != nil {
		errs = append(errs, err)
	}
	if c.DatabaseURL != "" {
		if _, err := pgx.ParseConfig(c.DatabaseURL); err != nil {
			errs = append(errs, fmt.Errorf("DATABASE_URL %q is not a Postgres connection string (want postgres://user:password@host:5432/dbname): %w", redact(c.DatabaseURL), err))
		}
	}
	receipts := c.Receipts.WithDefaults()
	if err := receipts.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.InboxRetention > 0 && c.InboxRetention < time.Minute {
		errs = append(errs, fmt.Errorf("inbox retention %v is under a minute: give at least the longest Retention of the schema's inbox consumers and webhook handlers, or a negative value to leave their purging to them", c.InboxRetention))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("shutdown grace %v is negative", c.ShutdownGrace))
	}
	if strings.ContainsAny(c.TaskQueue, " \t\n") {
		errs = append(errs, fmt.Errorf("task queue %q contains white space", c.TaskQueue))
	}
	return errors.Join(errs...)
}

func (c Config) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return 0, fmt.Errorf("log level %q: use debug, info, warn or error", c.LogLevel)
	}
	return l, nil
}

// redact hides a password in a connection string for messages.
func redact(url string) string {
	if cfg, err := pgx.ParseConfig(url); err == nil && cfg.Password != "" {
		return strings.Replace(url, cfg.Password, "***", 1)
	}
	return url
}
