package activity_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// liveness bounds how long a test waits for something that must happen without waiting on a
// lock. It is not a performance threshold: when it passes, something waited for the lock.
const liveness = 30 * time.Second

// lockReceipt holds k's receipt row locked in an open transaction until the test ends or the
// returned function is called.
func lockReceipt(t *testing.T, schema string, k keys.Key) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	var id string
	require.NoError(t, tx.QueryRow(ctx, "SELECT id FROM "+schema+".receipts WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) FOR UPDATE",
		k.Namespace, k.Tenant, k.Operation, k.ID).Scan(&id))
	unlocked := false
	unlock = func() {
		if !unlocked {
			unlocked = true
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	t.Cleanup(unlock)
	return unlock
}

// waitForLockWaiter waits until a backend of the database waits for a lock on schema's
// receipts.
func waitForLockWaiter(t *testing.T, schema string) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for time.Now().Before(deadline) {
		var waiting bool
		require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), `SELECT EXISTS (
			SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE NOT l.granted AND n.nspname = $1 AND c.relname = 'receipts'
			UNION ALL
			SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%receipts%')`, schema).Scan(&waiting))
		if waiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no completion waited for the locked receipt")
}

// One locked receipt must not stall the completions of other keys, although completions share
// statements: the batch skips the locked row, and only its own attempt waits for it.
func TestLockedReceiptDoesNotStallOtherCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{LockTimeout: time.Hour}) // waits end only when the lock does
	locked := call(t, "locked", map[string]int{"amount": 1})
	locked.Lease = time.Hour
	resume, lockedDone := pausedAttempt(ctx, s, locked, 1, nil)
	unlock := lockReceipt(t, schema, locked.Key)
	resume()
	waitForLockWaiter(t, schema)

	others := make(chan error, 8)
	for i := range cap(others) {
		c := call(t, fmt.Sprint("other-", i), map[string]int{"amount": i})
		go func() {
			_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return i, nil })
			others <- err
		}()
	}
	for range cap(others) {
		select {
		case err := <-others:
			require.NoError(t, err)
		case <-time.After(liveness):
			t.Fatal("completions of other keys waited for a locked receipt")
		}
	}
	unlock()
	require.NoError(t, (<-lockedDone).err)
	state, _ := receiptState(t, schema, locked.Key)
	require.Equal(t, operator.StateCompleted, state)
}

// A completion whose receipt stays locked writes again after each lock timeout until its lease
// ends (TestLockedCompletionKeepsItsResult), then gives up with a retryable StoreError: the
// lease is over, and the next attempt finds out.
func TestLockTimeoutBoundsACompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{LockTimeout: 50 * time.Millisecond})
	c := call(t, "locked", map[string]int{"amount": 1})
	c.Lease = 300 * time.Millisecond
	resume, done := pausedAttempt(ctx, s, c, 1, nil)
	lockReceipt(t, schema, c.Key)
	resume()
	select {
	case res := <-done:
		require.ErrorAs(t, res.err, new(*activity.StoreError))
		require.ErrorContains(t, res.err, "lock timeout")
	case <-time.After(liveness):
		t.Fatal("the completion waited for the lock beyond its lease")
	}
}

// A DoInNewTx duplicate must not wait until the activity's deadline on a duplicate that stalled with
// its transaction open: its statements run under the lock timeout, and it is told to retry.
func TestDoTxDuplicateDoesNotBlockOnAStalledAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{LockTimeout: 100 * time.Millisecond})
	stockSetup(t, schema)
	c := call(t, "order-1/reserve", map[string]int{"units": 1})
	c.Lease = time.Hour
	stalled, resumed := make(chan struct{}), make(chan struct{})
	resume := sync.OnceFunc(func() { close(resumed) })
	t.Cleanup(resume) // before the schema is dropped, which would wait for the stalled transaction
	firstDone := make(chan error, 1)
	go func() {
		_, err := activity.DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (int, error) {
			n, err := reserve(schema, 1)(ctx, tx) // holds the stock row's lock
			close(stalled)
			<-resumed // a worker paused with its transaction open
			return n, err
		})
		firstDone <- err
	}()
	<-stalled
	dup := make(chan error, 1)
	go func() {
		_, err := activity.DoInNewTx(ctx, s, c, reserve(schema, 1))
		dup <- err
	}()
	select {
	case err := <-dup:
		require.ErrorAs(t, err, new(*activity.InProgressError))
	case <-time.After(liveness):
		t.Fatal("the duplicate waited on the stalled attempt's locks")
	}
	resume()
	require.NoError(t, <-firstDone)
	stock, outbox := units(t, schema)
	require.Equal(t, 9, stock, "the stock was reserved twice")
	require.Equal(t, 1, outbox)
}
