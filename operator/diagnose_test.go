package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
)

// diagnosis runs Diagnose with lim and returns its findings by check, requiring them in the
// order of the Check constants.
func diagnosis(t *testing.T, op *operator.Client, lim operator.Limits) map[operator.Check]operator.Finding {
	t.Helper()
	findings, err := op.Diagnose(context.Background(), lim)
	require.NoError(t, err)
	order := []operator.Check{operator.CheckServer, operator.CheckMigrations, operator.CheckIndexes, operator.CheckIndexesValid,
		operator.CheckSynchronousCommit, operator.CheckUnresolved, operator.CheckDead, operator.CheckOldestPending, operator.CheckPurge}
	by := map[operator.Check]operator.Finding{}
	next := 0
	for _, f := range findings {
		for next < len(order) && order[next] != f.Check {
			next++
		}
		require.Less(t, next, len(order), "finding %+v out of order in %+v", f, findings)
		by[f.Check] = f
	}
	return by
}

// TestDiagnose: a healthy schema is all ok; what waits for a person fails past its limit, warns
// within it or with the limit off; a missing index, an invalid one and a schema not migrated
// fail, the last without the waiting checks.
func TestDiagnose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, schema := setupPlain(t, nil)
	db := pgtest.Pool(t)

	by := diagnosis(t, op, operator.Limits{})
	require.Len(t, by, 8, "%+v", by)
	for _, f := range by {
		require.Equal(t, operator.LevelOK, f.Level, "%+v", f)
	}

	unknown := call(t, "unknown", map[string]int{"amount": 1})
	unknown.Lease = 20 * time.Millisecond // the next attempt waits for it to end
	unknownOutcome(t, ctx, s, unknown)
	f := diagnosis(t, op, operator.Limits{})[operator.CheckUnresolved]
	require.Equal(t, operator.Finding{Level: operator.LevelFail, Check: operator.CheckUnresolved, Count: 1, Limit: 0,
		Message: "unresolved receipts waiting for someone: 1, more than the limit of 0; resolve or re-arm each"}, f)
	require.Equal(t, operator.LevelWarn, diagnosis(t, op, operator.Limits{Unresolved: 1})[operator.CheckUnresolved].Level)
	f = diagnosis(t, op, operator.Limits{Unresolved: -1})[operator.CheckUnresolved]
	require.Equal(t, operator.LevelWarn, f.Level)
	require.Contains(t, f.Message, "not checked")

	_, err := db.Exec(ctx, `INSERT INTO `+schema+`.outbox (id, topic, payload, digest, state) VALUES ('d1', 't', '\x00', '\x00', 'dead'), ('d2', 't', '\x00', '\x00', 'dead')`)
	require.NoError(t, err)
	f = diagnosis(t, op, operator.Limits{Dead: 1})[operator.CheckDead]
	require.Equal(t, operator.LevelFail, f.Level, "%+v", f)
	require.Equal(t, int64(2), f.Count)
	require.Equal(t, operator.LevelWarn, diagnosis(t, op, operator.Limits{Dead: 2})[operator.CheckDead].Level)

	_, err = db.Exec(ctx, `INSERT INTO `+schema+`.outbox (id, topic, payload, digest) VALUES ('q', 't', '\x00', '\x00')`)
	require.NoError(t, err)
	f = diagnosis(t, op, operator.Limits{})[operator.CheckOldestPending]
	require.Equal(t, operator.LevelOK, f.Level, "a message just put fails the default limit: %+v", f)
	_, err = db.Exec(ctx, `INSERT INTO `+schema+`.outbox (id, topic, payload, digest, created_at) VALUES ('p', 't', '\x00', '\x00', now() - interval '2 hours')`)
	require.NoError(t, err)
	f = diagnosis(t, op, operator.Limits{})[operator.CheckOldestPending]
	require.Equal(t, operator.LevelFail, f.Level, "the default limit is an hour: %+v", f)
	require.Equal(t, int64(2), f.Count)
	require.GreaterOrEqual(t, f.Waited, 2*time.Hour)
	require.Equal(t, operator.LevelOK, diagnosis(t, op, operator.Limits{OldestPending: 3 * time.Hour})[operator.CheckOldestPending].Level)
	require.Equal(t, operator.LevelOK, diagnosis(t, op, operator.Limits{OldestPending: -1})[operator.CheckOldestPending].Level)

	_, err = db.Exec(ctx, `DROP INDEX `+schema+`.outbox_ordering_idx`)
	require.NoError(t, err)
	f = diagnosis(t, op, operator.Limits{})[operator.CheckIndexes]
	require.Equal(t, operator.LevelFail, f.Level)
	require.Contains(t, f.Message, "outbox_ordering_idx")
	_, err = db.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = '`+schema+`.outbox_delivered_idx'::regclass`)
	require.NoError(t, err)
	f = diagnosis(t, op, operator.Limits{})[operator.CheckIndexesValid]
	require.Equal(t, operator.LevelFail, f.Level)
	require.Contains(t, f.Message, "outbox_delivered_idx")

	t.Run("NotMigrated", func(t *testing.T) {
		t.Parallel()
		bare, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: pgtest.Schema(t)})
		require.NoError(t, err)
		by := diagnosis(t, bare, operator.Limits{})
		require.Equal(t, operator.LevelFail, by[operator.CheckMigrations].Level)
		require.NotContains(t, by, operator.CheckUnresolved, "the waiting checks need the tables")
	})
}

// TestPurgeBacklog counts the settled receipts past their retention, not the unresolved ones
// Purge keeps, and how long ago the oldest expired.
func TestPurgeBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, schema := setupPlain(t, nil)
	b, err := op.PurgeBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, operator.PurgeBacklog{}, b)

	for _, id := range []string{"a", "b", "fresh"} {
		_, err := activity.Do(ctx, s, call(t, id, map[string]int{"amount": 1}), func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	unknown := call(t, "unknown", map[string]int{"amount": 1})
	unknown.Lease = 20 * time.Millisecond // the next attempt waits for it to end
	unknownOutcome(t, ctx, s, unknown)
	_, err = pgtest.Pool(t).Exec(ctx, `UPDATE `+schema+`.receipts SET expires_at = now() - interval '3 hours' WHERE id IN ('a', 'unknown')`)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, `UPDATE `+schema+`.receipts SET expires_at = now() - interval '1 hour' WHERE id = 'b'`)
	require.NoError(t, err)
	b, err = op.PurgeBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Receipts, "the unresolved receipt is kept, not backlog")
	require.GreaterOrEqual(t, b.Oldest, 3*time.Hour)
	require.Less(t, b.Oldest, 4*time.Hour)

	_, err = op.Purge(ctx, 0)
	require.NoError(t, err)
	b, err = op.PurgeBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, operator.PurgeBacklog{}, b)
}
