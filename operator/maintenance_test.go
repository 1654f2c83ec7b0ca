package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
)

// A run replaces its task's last run; a failed run keeps the time of the last success, and the
// next success moves it. Each task has its row.
func TestRecordMaintenanceRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, _ := setupPlain(t, nil)
	runs, err := op.MaintenanceRuns(ctx)
	require.NoError(t, err)
	require.Empty(t, runs)
	_, ok, err := op.LastRun(ctx, operator.TaskPurge)
	require.NoError(t, err)
	require.False(t, ok)

	start := time.Now()
	require.NoError(t, op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-a/41",
		Started: start, Finished: start.Add(1500 * time.Millisecond), Receipts: 12, Inbox: 3}))
	first, ok, err := op.LastRun(ctx, operator.TaskPurge)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "host-a/41", first.Runner)
	require.Equal(t, 1500*time.Millisecond, first.Finished.Sub(first.Started), "the run's duration is not the runner's")
	require.Equal(t, [2]int64{12, 3}, [2]int64{first.Receipts, first.Inbox})
	require.Empty(t, first.Error)
	require.Equal(t, first.Finished, first.LastSuccess, "a successful run is the last success")

	require.NoError(t, op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-b/7",
		Started: start, Finished: start, Receipts: 1, Error: "purge: ERROR: permission denied for table receipts (SQLSTATE 42501)"}))
	failed, _, err := op.LastRun(ctx, operator.TaskPurge)
	require.NoError(t, err)
	require.Equal(t, "host-b/7", failed.Runner)
	require.Equal(t, int64(1), failed.Receipts)
	require.Zero(t, failed.Inbox)
	require.Contains(t, failed.Error, "permission denied")
	require.Equal(t, first.LastSuccess, failed.LastSuccess, "a failed run moved the last success")
	require.True(t, failed.Finished.After(first.Finished))

	require.NoError(t, op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-a/41", Started: start, Finished: start}))
	again, _, err := op.LastRun(ctx, operator.TaskPurge)
	require.NoError(t, err)
	require.Empty(t, again.Error, "a success left the last failure's error")
	require.Equal(t, again.Finished, again.LastSuccess)

	require.NoError(t, op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: "vacuum", Runner: "cron", Started: start, Finished: start,
		Error: strings.Repeat("é", 1500)}))
	runs, err = op.MaintenanceRuns(ctx)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, []string{operator.TaskPurge, "vacuum"}, []string{runs[0].Task, runs[1].Task})
	require.Equal(t, strings.Repeat("é", 1000), runs[1].Error, "a long error is not cut to 2000 bytes on a character")
	require.True(t, runs[1].LastSuccess.IsZero(), "a task that never succeeded has a last success")
}

// RecordMaintenanceRun refuses a run it cannot make sense of, and records nothing.
func TestRecordMaintenanceRunRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, _ := setupPlain(t, nil)
	now := time.Now()
	for name, run := range map[string]operator.MaintenanceRun{
		"NoTask":        {Runner: "h/1", Started: now, Finished: now},
		"NoRunner":      {Task: operator.TaskPurge, Started: now, Finished: now},
		"EndsBefore":    {Task: operator.TaskPurge, Runner: "h/1", Started: now, Finished: now.Add(-time.Second)},
		"NegativeCount": {Task: operator.TaskPurge, Runner: "h/1", Started: now, Finished: now, Inbox: -1},
	} {
		require.ErrorIs(t, op.RecordMaintenanceRun(ctx, run), operator.ErrInvalidRun, name)
	}
	runs, err := op.MaintenanceRuns(ctx)
	require.NoError(t, err)
	require.Empty(t, runs)

	bare, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	_, err = bare.MaintenanceRuns(ctx)
	require.ErrorIs(t, err, migrate.ErrNotMigrated)
}

// Diagnose's purge check: nothing recorded is ok; the last run's success is ok and says what it
// deleted; a failure warns, quoting its error; no success for longer than Limits.SincePurge
// (two days by default) fails, unless the limit is negative.
func TestDiagnosePurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, schema := setupPlain(t, nil)
	purge := func(lim operator.Limits) operator.Finding { return purgeFinding(t, op, lim) }
	f := purge(operator.Limits{})
	require.Equal(t, operator.LevelOK, f.Level)
	require.Nil(t, f.Run)
	require.Contains(t, f.Message, "no purge run recorded yet")

	now := time.Now()
	require.NoError(t, op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-a/41", Started: now, Finished: now, Receipts: 12, Inbox: 3}))
	f = purge(operator.Limits{})
	require.Equal(t, operator.LevelOK, f.Level, "%+v", f)
	require.Regexp(t, `^the last purge, by "host-a/41" \d+s ago, deleted 12 receipts and 3 inbox records$`, f.Message)
	require.Equal(t, "host-a/41", f.Run.Runner)

	require.NoError(t, op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-b/7", Started: now, Finished: now,
		Error: "purge: \x1b[2Jdenied"}))
	f = purge(operator.Limits{})
	require.Equal(t, operator.LevelWarn, f.Level, "%+v", f)
	require.Contains(t, f.Message, `failed: "purge: \x1b[2Jdenied"; the next round tries again`, "the error is not quoted")

	_, err := pgtest.Pool(t).Exec(ctx, `UPDATE `+schema+`.maintenance_runs SET last_success_at = now() - interval '3 days'`)
	require.NoError(t, err)
	f = purge(operator.Limits{})
	require.Equal(t, operator.LevelFail, f.Level, "%+v", f)
	require.Contains(t, f.Message, "no purge has succeeded for 72h0m0s, longer than the limit of 48h0m0s")
	require.Equal(t, 72*time.Hour, f.Waited.Round(time.Hour))
	require.Equal(t, operator.LevelWarn, purge(operator.Limits{SincePurge: 4 * 24 * time.Hour}).Level)
	require.Equal(t, operator.LevelWarn, purge(operator.Limits{SincePurge: -1}).Level, "a negative limit checks the last success")

	_, err = pgtest.Pool(t).Exec(ctx, `UPDATE `+schema+`.maintenance_runs SET last_success_at = NULL`)
	require.NoError(t, err)
	f = purge(operator.Limits{})
	require.Equal(t, operator.LevelWarn, f.Level, "%+v", f)
	require.Contains(t, f.Message, "no purge has succeeded yet")
}

// With no purge run recorded, the purge check fails once a receipt the purge may delete has
// waited longer than Limits.SincePurge: nobody purges, or the purger cannot record its runs
// (a role not granted migration 009's table). A receipt still unresolved, however old, is not
// the purge's to delete and fails nothing.
func TestDiagnosePurgeWithNoRunRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, schema := setupPlain(t, nil)
	purge := func(lim operator.Limits) operator.Finding { return purgeFinding(t, op, lim) }
	receipt := func(id, state, expired string) {
		t.Helper()
		_, err := pgtest.Pool(t).Exec(ctx, `INSERT INTO `+schema+`.receipts (namespace, tenant, operation, id, token, fingerprint,
	fingerprint_version, state, result, effect_possible, lease_expires_at, completed_at, expires_at)
VALUES ('ns', '', 'Charge', $1, $1, '\x00', 1, $2, CASE WHEN $2 = 'completed' THEN '\x00'::bytea END, $2 = 'pending',
	CASE WHEN $2 = 'pending' THEN now() - interval '10 days' END, CASE WHEN $2 = 'completed' THEN now() END, now() - $3::interval)`,
			id, state, expired)
		require.NoError(t, err)
	}
	receipt("unresolved", "pending", "10 days")
	receipt("recent", "completed", "1 day")
	f := purge(operator.Limits{})
	require.Equal(t, operator.LevelOK, f.Level, "%+v", f)
	require.Contains(t, f.Message, "no purge run recorded yet")

	receipt("old", "completed", "3 days")
	f = purge(operator.Limits{})
	require.Equal(t, operator.LevelFail, f.Level, "%+v", f)
	require.Regexp(t, `^no purge run is recorded, and a receipt the purge may delete expired 72h0m\ds ago, longer than 48h0m0s: .*migration 009`, f.Message)
	require.Equal(t, operator.LevelOK, purge(operator.Limits{SincePurge: 4 * 24 * time.Hour}).Level)
	require.Equal(t, operator.LevelOK, purge(operator.Limits{SincePurge: -1}).Level, "a negative limit was checked")

	// A partitioned table drops a day whole, up to two days after its first receipt expired.
	require.NoError(t, op.Partition(ctx))
	require.Equal(t, operator.LevelOK, purge(operator.Limits{}).Level, "a partitioned table's day was due before it could be dropped")
	receipt("older", "completed", "5 days")
	f = purge(operator.Limits{})
	require.Equal(t, operator.LevelFail, f.Level, "%+v", f)
	require.Contains(t, f.Message, "expired 120h0m")
}

// purgeFinding is op's Diagnose finding of CheckPurge under lim.
func purgeFinding(t *testing.T, op *operator.Client, lim operator.Limits) operator.Finding {
	t.Helper()
	f, ok := diagnosis(t, op, lim)[operator.CheckPurge]
	require.True(t, ok, "no purge finding")
	return f
}
