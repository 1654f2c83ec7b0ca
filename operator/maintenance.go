// The record of maintenance runs: the last run of each task (the worker's purge round), so that
// the console and doctor can say when the purger last ran, who ran it, what it deleted and
// whether it failed.

package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
)

// TaskPurge is the task of the worker's purge round (worker.Env.PurgeRound) in the record of
// maintenance runs.
const TaskPurge = "purge"

// maxRunText bounds, in bytes, the runner and the error text a MaintenanceRun records: an error
// that quotes a whole statement or row is cut, not refused.
const maxRunText = 2000

// MaintenanceRun is one run of a maintenance task: what RecordMaintenanceRun records, and what
// MaintenanceRuns reads back, the last run of each task.
type MaintenanceRun struct {
	// Task names the task: TaskPurge for the worker's purge round.
	Task string
	// Runner is who ran it, as it names itself: host/pid for a worker.
	Runner string
	// Started and Finished are when the run began and ended. RecordMaintenanceRun records the
	// run as finished when it records it, by the database's clock, and started Finished-Started
	// before that; MaintenanceRuns returns those times.
	Started, Finished time.Time
	// Receipts and Inbox are what the run deleted: receipts, and inbox records.
	Receipts, Inbox int64
	// Error is the run's error; "" when it succeeded. RecordMaintenanceRun keeps at most 2000
	// bytes of it.
	Error string
	// LastSuccess is when a run of the task last succeeded (this one, when it did), zero when
	// none has. RecordMaintenanceRun ignores it: the database keeps it across failed runs.
	LastSuccess time.Time
}

// ErrInvalidRun is matched by RecordMaintenanceRun's error for a MaintenanceRun it refuses to
// record; nothing is recorded.
var ErrInvalidRun = errors.New("invalid maintenance run")

// recordRun replaces the task's row by this run, in one statement. last_success_at moves only
// when this run succeeded: a purge failing for days keeps the time of its last success.
const recordRun = `INSERT INTO %s AS m (task, runner, started_at, finished_at, receipts, inbox, error, last_success_at)
VALUES ($1, $2, now() - $3::bigint * interval '1 microsecond', now(), $4, $5, $6, CASE WHEN $6::text IS NULL THEN now() END)
ON CONFLICT (task) DO UPDATE SET runner = excluded.runner, started_at = excluded.started_at,
	finished_at = excluded.finished_at, receipts = excluded.receipts, inbox = excluded.inbox, error = excluded.error,
	last_success_at = coalesce(excluded.last_success_at, m.last_success_at)`

// RecordMaintenanceRun records run as its task's last run, replacing the one before: one UPSERT,
// under the client's LockTimeout and StatementTimeout like the other writes. It records the run
// as finished now, by the database's clock (so that runners' clocks do not move it), and keeps
// the time of the task's last success when run failed. It refuses, with ErrInvalidRun, a run
// without a Task or a Runner, and one that finished before it started or deleted a negative
// number. A Runner or Error longer than 2000 bytes is cut.
func (c *Client) RecordMaintenanceRun(ctx context.Context, run MaintenanceRun) error {
	switch {
	case run.Task == "":
		return fmt.Errorf("record a maintenance run: %w: Task is empty; name the task (operator.TaskPurge)", ErrInvalidRun)
	case run.Runner == "":
		return fmt.Errorf("record a maintenance run of %q: %w: Runner is empty; say who ran it (host/pid)", run.Task, ErrInvalidRun)
	case run.Finished.Before(run.Started):
		return fmt.Errorf("record a maintenance run of %q: %w: Finished %v is before Started %v", run.Task, ErrInvalidRun, run.Finished, run.Started)
	case run.Receipts < 0 || run.Inbox < 0:
		return fmt.Errorf("record a maintenance run of %q: %w: it deleted %d receipts and %d inbox records; counts are not negative",
			run.Task, ErrInvalidRun, run.Receipts, run.Inbox)
	}
	var failure *string
	if run.Error != "" {
		s := cut(run.Error)
		failure = &s
	}
	_, err := c.exec(ctx, fmt.Sprintf(recordRun, c.runs), run.Task, cut(run.Runner),
		run.Finished.Sub(run.Started).Microseconds(), run.Receipts, run.Inbox, failure)
	if err != nil {
		return fmt.Errorf("record the maintenance run of %q: %w", run.Task, c.explain(err))
	}
	return nil
}

// cut keeps at most maxRunText bytes of s, on a character boundary.
func cut(s string) string {
	if len(s) <= maxRunText {
		return s
	}
	return strings.ToValidUTF8(s[:maxRunText], "")
}

// MaintenanceRuns returns the last run of each maintenance task, by task name; none when no task
// has run. It reads a row per task, and changes nothing.
func (c *Client) MaintenanceRuns(ctx context.Context) ([]MaintenanceRun, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	rows, err := c.db.Query(ctx, fmt.Sprintf(`SELECT task, runner, started_at, finished_at, receipts, inbox,
		coalesce(error, ''), last_success_at FROM %s ORDER BY task`, c.runs))
	if err != nil {
		return nil, fmt.Errorf("read the maintenance runs: %w", c.explain(err))
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (MaintenanceRun, error) {
		var r MaintenanceRun
		var success *time.Time
		err := row.Scan(&r.Task, &r.Runner, &r.Started, &r.Finished, &r.Receipts, &r.Inbox, &r.Error, &success)
		if success != nil {
			r.LastSuccess = *success
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the maintenance runs: %w", c.explain(err))
	}
	return runs, nil
}

// LastRun returns task's last run, and false when it has none recorded.
func (c *Client) LastRun(ctx context.Context, task string) (MaintenanceRun, bool, error) {
	runs, err := c.MaintenanceRuns(ctx)
	if err != nil {
		return MaintenanceRun{}, false, err
	}
	for _, r := range runs {
		if r.Task == task {
			return r, true, nil
		}
	}
	return MaintenanceRun{}, false, nil
}

// purgeFinding is Diagnose's CheckPurge: the purger's last run, and how long ago a purge last
// succeeded against limit (negative: not checked). No run recorded is ok for a schema no worker
// has purged yet, and fails once a receipt the purge may delete has waited for it longer than
// limit (two days more on a partitioned table, whose days are dropped whole): nobody
// purges, or the purger cannot record its runs. A last run that failed is a warning (the next
// round tries again); no success for longer than limit fails. Runs that never succeeded only
// warn: nothing records when the first of them was.
func (c *Client) purgeFinding(ctx context.Context, limit time.Duration) (Finding, error) {
	run, ok, err := c.LastRun(ctx, TaskPurge)
	if err != nil {
		return Finding{}, err
	}
	f := Finding{Level: LevelOK, Check: CheckPurge}
	if !ok {
		return c.unrecordedPurgeFinding(ctx, f, limit)
	}
	f.Run = &run
	var now time.Time
	if err := c.db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return Finding{}, err
	}
	ago := func(t time.Time) time.Duration { return now.Sub(t).Round(time.Second) }
	last := fmt.Sprintf("the last purge, by %q %s ago, ", run.Runner, ago(run.Finished))
	if run.Error == "" {
		last += fmt.Sprintf("deleted %d receipts and %d inbox records", run.Receipts, run.Inbox)
	} else {
		last += fmt.Sprintf("failed: %q", run.Error)
	}
	if !run.LastSuccess.IsZero() {
		f.Waited = ago(run.LastSuccess)
	}
	switch {
	case limit >= 0 && !run.LastSuccess.IsZero() && f.Waited > limit:
		f.Level = LevelFail
		f.Message = fmt.Sprintf("no purge has succeeded for %s, longer than the limit of %s; %s. Is a worker purging (worker.Config.PurgeEvery), and can it?",
			f.Waited, limit, last)
	case run.Error != "" && run.LastSuccess.IsZero():
		f.Level = LevelWarn
		f.Message = fmt.Sprintf("no purge has succeeded yet; %s", last)
	case run.Error != "":
		f.Level = LevelWarn
		f.Message = fmt.Sprintf("%s; the next round tries again; the last success was %s ago", last, f.Waited)
	default:
		f.Message = last
	}
	return f, nil
}

// unrecordedPurgeFinding is purgeFinding's f when no purge run is recorded: how long the oldest
// receipt the purge may delete has waited for it, against limit.
func (c *Client) unrecordedPurgeFinding(ctx context.Context, f Finding, limit time.Duration) (Finding, error) {
	f.Message = "no purge run recorded yet: each purge round a worker runs is recorded"
	if limit < 0 {
		return f, nil
	}
	var overdueUS *int64
	if err := c.scanTimed(ctx, fmt.Sprintf(oldestPurgeable, c.receipts, schema.Purgeable), nil, &overdueUS); err != nil {
		return Finding{}, fmt.Errorf("read the oldest purgeable receipt: %w", c.explain(err))
	}
	if overdueUS == nil {
		return f, nil
	}
	overdue := (time.Duration(*overdueUS) * time.Microsecond).Round(time.Second)
	allowed := limit
	switch on, err := c.Partitioned(ctx); {
	case err != nil:
		return Finding{}, err
	case on:
		allowed += partitionGrace
	}
	if overdue > allowed {
		f.Level = LevelFail
		f.Message = fmt.Sprintf("no purge run is recorded, and a receipt the purge may delete expired %s ago, longer than %s: "+
			"is a worker purging (worker.Config.PurgeEvery)? A purger whose role cannot write maintenance_runs purges but records nothing: "+
			"grant it again (tempotent migrate --print-grants ROLE, migration 009)", overdue, allowed)
	}
	return f, nil
}

// partitionGrace is how much longer than on a plain table a purgeable receipt may wait on a
// partitioned one: its day is dropped a day after the day's last receipt expires, which is up to
// a day after the first.
const partitionGrace = 48 * time.Hour

// oldestPurgeable is how long ago, in microseconds, the oldest receipt that schema.Purgeable
// (%[2]s) says may go from %[1]s expired, NULL when none may. It walks the expiry index from
// the oldest, past the expired receipts the purge keeps (unresolved ones: few, each waiting for a
// person), to the first it may delete.
const oldestPurgeable = `
SELECT (SELECT (extract(epoch FROM now() - expires_at) * 1e6)::bigint FROM %[1]s WHERE %[2]s ORDER BY expires_at LIMIT 1)`
