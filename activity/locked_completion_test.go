package activity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
)

// lockWaits returns the distinct statements (by their start) seen waiting for a lock on schema's
// receipts, polling until it has seen want of them or done is closed.
func lockWaits(t *testing.T, schema string, want int, done <-chan struct{}) int {
	t.Helper()
	seen := map[time.Time]bool{}
	deadline := time.Now().Add(liveness)
	for len(seen) < want && time.Now().Before(deadline) {
		select {
		case <-done:
			return len(seen)
		default:
		}
		rows, err := pgtest.Pool(t).Query(context.Background(), `SELECT query_start FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%receipts%'`, schema)
		require.NoError(t, err)
		for rows.Next() {
			var at time.Time
			require.NoError(t, rows.Scan(&at))
			seen[at] = true
		}
		require.NoError(t, rows.Err())
		time.Sleep(5 * time.Millisecond)
	}
	return len(seen)
}

// A completion that meets its receipt locked past the lock timeout keeps the result it knows and
// writes it again, under its reservation, until the lock is gone (within its lease): the result
// is recorded, and the next attempt replays it instead of meeting an unknown outcome at a
// downstream that does not deduplicate. Before, the first lock timeout dropped the result.
func TestLockedCompletionKeepsItsResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{LockTimeout: 100 * time.Millisecond})
	c := call(t, "order-1/charge", map[string]int{"amount": 100})
	c.Lease = time.Hour // the lease outlasts the lock: the completion must wait it out
	resume, done := pausedAttempt(ctx, s, c, "ch_1", nil)
	unlock := lockReceipt(t, schema, c.Key)
	resume()

	returned := make(chan struct{})
	var answer attemptAnswer[string]
	go func() { answer = <-done; close(returned) }()
	// Two lock waits of the completion, one after the other: the first one's lock timeout
	// passed, and the completion is still trying. (Before the fix, the attempt returned.)
	lockWaits(t, schema, 2, returned)
	unlock()
	<-returned
	require.NoError(t, answer.err, "the completion dropped a result it knew when the lock timeout passed")
	require.Equal(t, "ch_1", answer.out)
	state, _ := receiptState(t, schema, c.Key)
	require.Equal(t, operator.StateCompleted, state)

	again, err := activity.Do(ctx, s, c, func(context.Context) (string, error) {
		t.Error("the next attempt called the downstream again")
		return "ch_2", nil
	})
	require.NoError(t, err, "the next attempt did not replay the result")
	require.Equal(t, "ch_1", again)
}
