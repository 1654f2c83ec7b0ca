package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
)

// liveness bounds how long the test waits for a call that must give up on its own. It is not a
// performance threshold: when it passes, the call waited for the lock.
const liveness = 30 * time.Second

// TestTimedStatementsGiveUpBehindATableLock: the operator's writes (resolve, purge, recording a
// maintenance run) give up with an error, within the client's timeouts, while DDL holds their
// table locked, instead of
// waiting for it (pgx prepares the statement, which takes the table's lock, before the batch's
// lock_timeout is set). A worker's purge round holds its schema's purge lock meanwhile.
func TestTimedStatementsGiveUpBehindATableLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, schema := setupPlain(t, nil)
	c := call(t, "order-1", map[string]int{"amount": 1})
	c.Lease = 20 * time.Millisecond
	unknownOutcome(t, ctx, s, c)
	// A client of its own, so that its pool's connections have not prepared the statements.
	pool := pgtest.CountingPool(t, new(pgtest.Counter))
	op, err := operator.NewClient(pool, operator.Config{Schema: schema, LockTimeout: 100 * time.Millisecond, StatementTimeout: 200 * time.Millisecond})
	require.NoError(t, err)

	ddl, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ddl.Rollback(context.Background()) })
	_, err = ddl.Exec(ctx, "LOCK TABLE "+schema+".receipts, "+schema+".maintenance_runs IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	for name, write := range map[string]func() error{
		"Resolve": func() error {
			_, err := op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: false, By: "ops", Reason: "checked the ledger"})
			return err
		},
		"Purge": func() error { _, err := op.Purge(ctx, 10); return err },
		"RecordMaintenanceRun": func() error {
			now := time.Now()
			return op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host/1", Started: now, Finished: now})
		},
	} {
		done := make(chan error, 1)
		go func() { done <- write() }()
		select {
		case err := <-done:
			require.Error(t, err, "%s wrote through a table held by DDL", name)
		case <-time.After(liveness):
			t.Fatalf("%s waited for the table lock past its timeouts", name)
		}
	}
}
