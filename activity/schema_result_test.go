package activity_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
)

// The schema refuses a completed receipt without its result (migration 006): a write that marks
// a receipt completed and forgets the result fails instead of leaving a receipt that replays
// nothing. A void result (nil) is stored as a result too, and a failed receipt holds its failure,
// not a result.
func TestCompletedReceiptNeedsItsResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	exec := func(sql string, args ...any) error {
		_, err := pgtest.Pool(t).Exec(ctx, sql, args...)
		return err
	}

	c := call(t, "order-1/charge", map[string]int{"amount": 100})
	resume, done := pausedAttempt(ctx, s, c, "ch_1", nil)
	err := exec(`UPDATE `+schema+`.receipts SET state = 'completed', lease_expires_at = NULL, completed_at = now() WHERE id = $1`, c.Key.ID)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a receipt was completed without its result: %v", err)
	require.Equal(t, "23514", pgErr.Code, "not the check constraint: %v", err) // check_violation
	resume()
	require.NoError(t, (<-done).err)

	void := call(t, "order-2/notify", map[string]int{"amount": 100})
	calls := 0
	for range 2 {
		got, err := activity.Do(ctx, s, void, func(context.Context) (any, error) { calls++; return nil, nil })
		require.NoError(t, err, "a void result could not be recorded")
		require.Nil(t, got)
	}
	require.Equal(t, 1, calls, "a void result was not replayed")
	var state string
	var hasResult bool
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT state, result IS NOT NULL FROM `+schema+`.receipts WHERE id = $1`,
		void.Key.ID).Scan(&state, &hasResult))
	require.Equal(t, operator.StateCompleted, state)
	require.True(t, hasResult)

	failed := call(t, "order-3/charge", map[string]int{"amount": 100})
	for range 2 {
		_, err := activity.Do(ctx, s, failed, func(context.Context) (string, error) {
			return "", temporal.NewNonRetryableApplicationError("declined", "CardDeclined", nil)
		})
		requireAppErrorType(t, err, "CardDeclined")
	}
	state, _ = receiptState(t, schema, failed.Key)
	require.Equal(t, operator.StateFailed, state)
}

// Migration 006 gives the void results stored before it (no result) the value a void result is
// stored as now, so that its constraint holds on them, and they still replay as void. Applied
// again after its down migration, or after an operator added the constraint by hand (NOT VALID,
// as the migration's comment says for large tables), it applies cleanly.
func TestMigration006KeepsOldVoidResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	migrations, err := migrate.List(schema)
	require.NoError(t, err)
	var m006 migrate.Migration
	for _, m := range migrations {
		if m.Version == 6 {
			m006 = m
		}
	}
	require.Equal(t, "completed_result", m006.Name)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pgtest.Pool(t).Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	unapply := func() {
		t.Helper()
		exec(m006.Down)
		exec(`DELETE FROM ` + schema + `.tempotent_migration WHERE version = 6`)
	}

	void := call(t, "order-1/notify", map[string]int{"amount": 100})
	calls := 0
	notify := func(context.Context) (any, error) { calls++; return nil, nil }
	_, err = activity.Do(ctx, s, void, notify)
	require.NoError(t, err)

	unapply()
	exec(`UPDATE `+schema+`.receipts SET result = NULL WHERE id = $1`, void.Key.ID) // as stored before 006
	require.NoError(t, s.Migrate(ctx))
	var hasResult bool
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT result IS NOT NULL FROM `+schema+`.receipts WHERE id = $1`,
		void.Key.ID).Scan(&hasResult))
	require.True(t, hasResult, "006 left an old void result without a result")
	got, err := activity.Do(ctx, s, void, notify)
	require.NoError(t, err, "an old void result does not replay after 006")
	require.Nil(t, got)
	require.Equal(t, 1, calls)

	unapply()
	exec(`ALTER TABLE ` + schema + `.receipts ADD CONSTRAINT receipts_completed_result
		CHECK (state <> 'completed' OR result IS NOT NULL) NOT VALID`)
	require.NoError(t, s.Migrate(ctx), "006 failed on a constraint added by hand beforehand")
	var valid bool
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT bool_and(convalidated) FROM pg_constraint
		WHERE conname = 'receipts_completed_result' AND connamespace = $1::regnamespace`, schema).Scan(&valid))
	require.True(t, valid, "006 left the constraint not validated")
}
