package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/worker"
)

// roleEnv is a purging Env connected as a runtime role holding migrate.Grants, and an operator
// client of the owner's to read what the rounds recorded.
func roleEnv(t *testing.T, met *counters) (env *worker.Env, schema, role string, reader *operator.Client) {
	t.Helper()
	schema, role = grantedRole(t)
	pool := pgtest.PoolAs(t, role)
	op, err := operator.NewClient(pool, operator.Config{Schema: schema, MetricsHandler: met})
	require.NoError(t, err)
	reader, err = operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema})
	require.NoError(t, err)
	return &worker.Env{Config: worker.Config{}.WithDefaults(), Pool: pool, Operator: op}, schema, role, reader
}

// lastPurge is the purge's last recorded run.
func lastPurge(t *testing.T, op *operator.Client) operator.MaintenanceRun {
	t.Helper()
	run, ok, err := op.LastRun(context.Background(), operator.TaskPurge)
	require.NoError(t, err)
	require.True(t, ok, "no purge run recorded")
	return run
}

// Every round that runs is recorded, by this process, with what it deleted: a success, then a
// failure (the role loses DELETE on the receipts, as a wrong grant would take it) with its error
// and the last success kept. A round that waits its turn records nothing.
func TestPurgeRoundRecordsItsRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	met := &counters{}
	env, schema, role, reader := roleEnv(t, met)
	host, err := os.Hostname()
	require.NoError(t, err)

	// Another worker is purging: this round does not run, and there is nothing to record.
	other, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = other.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", "tempotent.purge."+schema)
	require.NoError(t, err)
	_, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	require.False(t, ran)
	_, ok, err := reader.LastRun(ctx, operator.TaskPurge)
	require.NoError(t, err)
	require.False(t, ok, "a round that did not run was recorded")
	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", "tempotent.purge."+schema)
	require.NoError(t, err)

	for i := range 3 {
		record(t, schema, "billing", fmt.Sprint(i), 31*24*time.Hour)
	}
	purged, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, worker.Purged{Inbox: 3}, purged)
	ok1 := lastPurge(t, reader)
	require.Equal(t, fmt.Sprintf("%s/%d", host, os.Getpid()), ok1.Runner)
	require.Equal(t, [2]int64{0, 3}, [2]int64{ok1.Receipts, ok1.Inbox})
	require.Empty(t, ok1.Error)
	require.Equal(t, ok1.Finished, ok1.LastSuccess)
	require.False(t, ok1.Finished.Before(ok1.Started))

	owner(t, schema, "REVOKE DELETE ON {s}.receipts FROM "+pgx.Identifier{role}.Sanitize())
	_, ran, err = env.PurgeRound(ctx)
	require.True(t, ran)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code)
	require.NotErrorIs(t, err, worker.ErrRoundNotRecorded, "the failed round was recorded, but the error says not")
	require.Equal(t, int64(1), met.get(worker.MetricPurgeFailed))
	failed := lastPurge(t, reader)
	require.Equal(t, err.Error(), failed.Error, "the recorded error is not the round's")
	require.Contains(t, failed.Error, "permission denied for table receipts")
	require.Equal(t, ok1.LastSuccess, failed.LastSuccess, "the failure moved the last success")
	require.True(t, failed.Finished.After(ok1.Finished))
}

// A record that cannot be written (the role loses UPDATE on maintenance_runs) does not hide the
// round: a successful purge reports what it deleted and an error matching ErrRoundNotRecorded,
// not counted as a failed purge; a failed purge's own error comes first and still matches.
func TestPurgeRoundNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	met := &counters{}
	env, schema, role, reader := roleEnv(t, met)
	_, _, err := env.PurgeRound(ctx) // a first run, so that the next one is an update
	require.NoError(t, err)
	first := lastPurge(t, reader)
	r := pgx.Identifier{role}.Sanitize()
	owner(t, schema, "REVOKE UPDATE ON {s}.maintenance_runs FROM "+r)

	record(t, schema, "billing", "old", 31*24*time.Hour)
	purged, ran, err := env.PurgeRound(ctx)
	require.True(t, ran)
	require.Equal(t, worker.Purged{Inbox: 1}, purged, "what the round deleted is lost with its record")
	require.ErrorIs(t, err, worker.ErrRoundNotRecorded)
	require.ErrorContains(t, err, "permission denied for table maintenance_runs")
	require.Zero(t, met.get(worker.MetricPurgeFailed), "a round that purged was counted as failed")
	require.Equal(t, first, lastPurge(t, reader))

	owner(t, schema, "REVOKE DELETE ON {s}.receipts FROM "+r)
	_, ran, err = env.PurgeRound(ctx)
	require.True(t, ran)
	require.ErrorIs(t, err, worker.ErrRoundNotRecorded)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Contains(t, pgErr.Message, "receipts", "the purge's own error is hidden behind the record's")
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined))
	require.Contains(t, joined.Unwrap()[0].Error(), "permission denied for table receipts", "the purge's error is not first")
	require.Equal(t, int64(1), met.get(worker.MetricPurgeFailed))
}

// A round cut short by the worker stopping (its ctx cancelled while the inbox's purge waits for
// the table) is not recorded: it did not fail, it was stopped, and the last run stays the one
// before it.
func TestPurgeRoundCutShortIsNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	met := &counters{}
	env := purgeEnv(t, schema, 0, met) // long lock timeouts: the round waits for the table
	_, _, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	before := lastPurge(t, env.Operator)

	release, waiting := lockInbox(t, schema)
	defer release()
	roundCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, _, err := env.PurgeRound(roundCtx); done <- err }()
	require.Eventually(t, waiting, 10*time.Second, 10*time.Millisecond, "the round never reached the inbox")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, before, lastPurge(t, env.Operator), "a round cut short was recorded")
	require.Zero(t, met.get(worker.MetricPurgeFailed))
}
