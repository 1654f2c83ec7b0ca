// Diagnosing a deployment from the database's side: `tempotent doctor`'s checks that need no
// flags but limits, shared with the console's overview.

package operator

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// Level is how a Finding judges what it found.
type Level string

// The levels of a Finding, from good to bad.
const (
	LevelOK   Level = "ok"
	LevelWarn Level = "warn"
	LevelFail Level = "fail"
)

// Check names what a Finding checked.
type Check string

// The checks Diagnose runs, in the order it reports them.
const (
	CheckServer            Check = "server"             // the database answers
	CheckMigrations        Check = "migrations"         // every migration is applied
	CheckIndexes           Check = "indexes"            // every index the migrations create is there
	CheckIndexesValid      Check = "indexes-valid"      // none of them is invalid (reported only when one is)
	CheckSynchronousCommit Check = "synchronous-commit" // commits are durable
	CheckUnresolved        Check = "unresolved"         // unresolved receipts against Limits.Unresolved
	CheckDead              Check = "dead"               // dead outbox messages against Limits.Dead
	CheckOldestPending     Check = "oldest-pending"     // the oldest pending message against Limits.OldestPending
	CheckPurge             Check = "purge"              // the purger's last run, and its last success against Limits.SincePurge
)

// Finding is one check's verdict. Message says what was found and what to do, for a person.
type Finding struct {
	Level   Level
	Check   Check
	Message string
	// Count is what the waiting checks counted: unresolved receipts (CheckUnresolved), dead
	// messages (CheckDead), pending messages (CheckOldestPending); Limit is the limit it was
	// judged against.
	Count, Limit int64
	// Waited is how long the oldest pending message has waited (CheckOldestPending), and how
	// long ago a purge last succeeded (CheckPurge; zero when none has).
	Waited time.Duration
	// Run is the purger's last run (CheckPurge), nil when none is recorded.
	Run *MaintenanceRun
}

// OldestPendingDefault is Limits.OldestPending's default: a running dispatcher delivers within
// seconds, or retries with a backoff that stays under an hour until it parks the message as dead.
const OldestPendingDefault = time.Hour

// SincePurgeDefault is Limits.SincePurge's default: a worker purges every ten minutes
// (worker.PurgeEveryDefault), and a daily purge job of your own that misses one day is not yet
// failing.
const SincePurgeDefault = 48 * time.Hour

// Limits are the thresholds for what waits for a person. A count above its limit fails its
// check; within it, a count above zero is a warning. A negative limit turns its check off (a
// count above zero is then a warning). The zero Limits fails on any unresolved receipt or dead
// message, on a pending message older than OldestPendingDefault, and on no purge succeeding for
// SincePurgeDefault.
type Limits struct {
	Unresolved int64 // unresolved receipts allowed
	Dead       int64 // dead outbox messages allowed
	// OldestPending is how long the oldest pending outbox message may have waited. Default
	// OldestPendingDefault.
	OldestPending time.Duration
	// SincePurge is how long ago a purge may last have succeeded, once one has run (the record
	// of maintenance runs, TaskPurge). Default SincePurgeDefault; negative: not checked.
	SincePurge time.Duration
}

// Diagnose checks the deployment from the database's side, as `tempotent doctor` does: the
// server answers, the client's schema has every migration, every index the migrations create is
// there and valid, synchronous_commit is on, and, once the schema is migrated, what waits for a
// person (unresolved receipts; the outbox's dead messages and oldest pending one, in the same
// schema) and the purger's last run against lim. It reports one Finding per check, in the order
// of the Check constants; a failure to ask the database is its error. It reads the whole
// receipts table's unresolved index and the outbox's: cheap, but not free; do not call it in a
// tight loop.
func (c *Client) Diagnose(ctx context.Context, lim Limits) ([]Finding, error) {
	lim.OldestPending = cmp.Or(lim.OldestPending, OldestPendingDefault)
	lim.SincePurge = cmp.Or(lim.SincePurge, SincePurgeDefault)
	var out []Finding
	report := func(level Level, check Check, format string, args ...any) *Finding {
		out = append(out, Finding{Level: level, Check: check, Message: fmt.Sprintf(format, args...)})
		return &out[len(out)-1]
	}
	name := c.cfg.Schema

	var version string
	if err := c.db.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	cfg := c.db.Config().ConnConfig
	report(LevelOK, CheckServer, "postgres %s at %s:%d, database %q", version, cfg.Host, cfg.Port, cfg.Database)

	missing, err := migrate.Missing(ctx, c.db, name)
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	migrations, err := migrate.List(name)
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	if len(missing) > 0 {
		report(LevelFail, CheckMigrations, "schema %q lacks migrations %s: run tempotent migrate (or apply tempotent migrate --print with your tool)",
			name, migrationNames(missing))
	} else {
		report(LevelOK, CheckMigrations, "schema %q has all %d migrations", name, len(migrations))
	}

	want, absent, invalid, err := c.indexes(ctx, migrations)
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	switch {
	case len(missing) > 0:
		// the missing migrations say it already
	case len(absent) > 0:
		report(LevelFail, CheckIndexes, "indexes missing in schema %q: %s; they make purge, the unresolved count and lookups cheap. Recreate them as the migrations do (tempotent migrate --print)",
			name, strings.Join(absent, ", "))
	default:
		report(LevelOK, CheckIndexes, "all %d indexes present", len(want))
	}
	if len(invalid) > 0 {
		report(LevelFail, CheckIndexesValid, "indexes not valid (an interrupted CREATE INDEX CONCURRENTLY?): %s; DROP them and create them again",
			strings.Join(invalid, ", "))
	}

	var syncCommit string
	if err := c.db.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit); err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	if syncCommit == "off" {
		report(LevelFail, CheckSynchronousCommit, "synchronous_commit is off for this database: a reservation for a downstream that does not deduplicate must be durable before the call. Turn it on (tempotent turns it off per statement where that is safe)")
	} else {
		report(LevelOK, CheckSynchronousCommit, "synchronous_commit is %s", syncCommit)
	}

	if len(missing) > 0 {
		return out, nil
	}
	unresolved, err := c.Unresolved(ctx)
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	o, err := outbox.New(c.db, &outbox.Config{Schema: name})
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	st, err := o.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	if unresolved == 0 {
		report(LevelOK, CheckUnresolved, "nothing unresolved")
	} else {
		level, verdict := judge(unresolved, lim.Unresolved)
		report(level, CheckUnresolved, "unresolved receipts waiting for someone: %d, %s; resolve or re-arm each", unresolved, verdict)
	}
	out[len(out)-1].Count, out[len(out)-1].Limit = unresolved, lim.Unresolved
	if st.Dead == 0 {
		report(LevelOK, CheckDead, "no dead outbox messages")
	} else {
		level, verdict := judge(st.Dead, lim.Dead)
		report(level, CheckDead, "dead outbox messages: %d, %s; requeue or discard each", st.Dead, verdict)
	}
	out[len(out)-1].Count, out[len(out)-1].Limit = st.Dead, lim.Dead
	var f *Finding
	switch {
	case st.Pending == 0:
		f = report(LevelOK, CheckOldestPending, "no pending outbox messages")
	case lim.OldestPending < 0 || st.OldestPending <= lim.OldestPending:
		f = report(LevelOK, CheckOldestPending, "pending outbox messages: %d, the oldest waiting for %s", st.Pending, st.OldestPending.Round(time.Second))
	default:
		f = report(LevelFail, CheckOldestPending, "oldest pending outbox message: waiting for %s (%d pending), longer than the limit of %s: no dispatcher running, a receiver failing, or a dead message holding its key back?",
			st.OldestPending.Round(time.Second), st.Pending, lim.OldestPending)
	}
	f.Count, f.Waited = st.Pending, st.OldestPending
	purge, err := c.purgeFinding(ctx, lim.SincePurge)
	if err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	return append(out, purge), nil
}

// judge judges a count n above zero against its limit.
func judge(n, limit int64) (Level, string) {
	switch {
	case limit < 0:
		return LevelWarn, "not checked (a negative limit)"
	case n > limit:
		return LevelFail, fmt.Sprintf("more than the limit of %d", limit)
	}
	return LevelWarn, fmt.Sprintf("within the limit of %d", limit)
}

// indexPattern finds the indexes the migrations create; sqlComment strips the comments that
// name indexes in passing.
var (
	indexPattern = regexp.MustCompile(`CREATE (?:UNIQUE )?INDEX (?:IF NOT EXISTS )?(\w+)`)
	sqlComment   = regexp.MustCompile(`--[^\n]*`)
)

// indexes returns the indexes migrations create (want), those of them absent from the schema,
// and those present but not valid.
func (c *Client) indexes(ctx context.Context, migrations []migrate.Migration) (want, absent, invalid []string, err error) {
	for _, m := range migrations {
		for _, match := range indexPattern.FindAllStringSubmatch(sqlComment.ReplaceAllString(m.Up, ""), -1) {
			want = append(want, match[1])
		}
	}
	var partitioned bool
	if err := c.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_class WHERE oid = to_regclass($1) AND relkind = 'p')",
		c.receipts).Scan(&partitioned); err != nil {
		return nil, nil, nil, err
	}
	if partitioned {
		// Partition made the partitioned table's indexes under names of their own.
		for i, idx := range want {
			if rest, ok := strings.CutPrefix(idx, "receipts_"); ok {
				want[i] = "receipts_partitioned_" + rest
			}
		}
	}
	valid := map[string]bool{}
	rows, err := c.db.Query(ctx, `SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`, c.cfg.Schema)
	if err != nil {
		return nil, nil, nil, err
	}
	var name string
	var ok bool
	if _, err := pgx.ForEachRow(rows, []any{&name, &ok}, func() error { valid[name] = ok; return nil }); err != nil {
		return nil, nil, nil, err
	}
	for _, idx := range want {
		isValid, present := valid[idx]
		switch {
		case !present:
			absent = append(absent, idx)
		case !isValid:
			invalid = append(invalid, idx)
		}
	}
	return want, absent, invalid, nil
}

// migrationNames lists migrations as "005_audit, 006_completed_result".
func migrationNames(migrations []migrate.Migration) string {
	s := make([]string, len(migrations))
	for i, m := range migrations {
		s[i] = m.String()
	}
	return strings.Join(s, ", ")
}

// PurgeBacklog is what Purge could delete now and has not: a number that grows while no worker
// purges.
type PurgeBacklog struct {
	// Receipts counts the receipts past their retention that Purge may delete (settled ones;
	// the unresolved it keeps are not counted).
	Receipts int64
	// Oldest is how long ago the longest-expired of them passed its retention; zero when none.
	Oldest time.Duration
}

// PurgeBacklog counts the receipts Purge may delete now, by the database's clock. Nothing
// records when Purge last ran; a backlog that grows says no worker purges. It reads every
// receipt past its retention.
func (c *Client) PurgeBacklog(ctx context.Context) (PurgeBacklog, error) {
	var b PurgeBacklog
	var oldestUS int64
	err := c.db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce((extract(epoch FROM now() - min(expires_at)) * 1000000)::bigint, 0)
FROM %s WHERE %s`, c.receipts, schema.Purgeable)).Scan(&b.Receipts, &oldestUS)
	if err != nil {
		return PurgeBacklog{}, fmt.Errorf("count the purge backlog: %w", c.explain(err))
	}
	b.Oldest = time.Duration(oldestUS) * time.Microsecond
	return b, nil
}
