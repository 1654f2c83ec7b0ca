//go:build unix

package faults_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/samples/payment"
)

// Row 20: an asynchronous reservation is lost. Charge's provider deduplicates, so its
// reservation commits without waiting for the WAL flush, and a crash before the flush loses it.
// Attempt A reserves an order's business key (QuickCharge) and is paused (SIGSTOP) once the
// provider applied its charge; Postgres crashes and comes back without the reservation. Checkout
// B then reserves the same key afresh, on a task queue of its own, and only then does A wake
// (SIGCONT) and try to record its outcome. A must write nothing and release nothing on B's
// receipt, and no caller may get a result recorded for another payload.
func TestRow20ReservationLost(t *testing.T) {
	// B reserved the key again for the same request and is still running: only the reservation
	// identity tells A's write from B's (same fence number 1, same fingerprint, both pending).
	t.Run("SameRequest", func(t *testing.T) {
		t.Parallel()
		w, stale, o, a := loseReservation(t)
		queueB := w.queue + "-b"
		b := w.startWorker("TEMPOTENT_TASK_QUEUE="+queueB, failpoint.EnvVar+"="+failpoint.AfterReserve+"=pause")
		runB, err := w.temporal.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: o.ID + "-b", TaskQueue: queueB}, "QuickCharge", o)
		require.NoError(t, err)
		b.waitFor("failpoint "+failpoint.AfterReserve+" reached", 30*time.Second)
		held := w.receiptRow("charge", "")
		require.Equal(t, operator.StatePending, held.State)
		require.Equal(t, int64(1), held.Fence, "B's reservation is a new row")

		require.NoError(t, stale.Signal(syscall.SIGCONT))
		stale.awaitLogged(logFencedOut, 2*time.Minute)
		require.Equal(t, held, w.receiptRow("charge", ""), "the stale attempt wrote to, or released, B's reservation")

		b.Kill()
		w.startWorker("TEMPOTENT_TASK_QUEUE=" + queueB)
		w.startWorker()
		charges := w.charges(o.ID)
		require.Len(t, charges, 1)
		for _, run := range []client.WorkflowRun{a, runB} {
			ch, err := quickChargeResult(run)
			require.NoError(t, err)
			require.Equal(t, charges[0].ID, ch.ID, "%s got another charge", run.GetID())
		}
		require.Len(t, w.charges(o.ID), 1)
		require.Equal(t, 2, w.ledger().RequestsByKey[charges[0].Token], "A's request and B's retry, which the provider deduplicated")
		require.Zero(t, w.pending())
	})

	// B reserved the key again for another request (another amount), and the provider refused
	// the token with B's parameters: B's receipt records that. A's retries and A itself must not
	// take B's outcome as theirs.
	t.Run("OtherRequest", func(t *testing.T) {
		t.Parallel()
		w, stale, o, a := loseReservation(t)
		other := o
		other.Amount++
		queueB := w.queue + "-b"
		w.startWorker("TEMPOTENT_TASK_QUEUE=" + queueB)
		b, err := w.temporal.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: o.ID + "-b", TaskQueue: queueB}, "QuickCharge", other)
		require.NoError(t, err)
		_, err = quickChargeResult(b)
		temporaltest.RequireAppError(t, err, activity.ErrTypePayloadMismatch, false)
		require.ErrorContains(t, err, "can only be used with the same parameters", "B's error is not the provider's answer to B")
		recorded := w.receiptRow("charge", "")
		require.Equal(t, operator.StateFailed, recorded.State)

		w.startWorker()
		_, err = quickChargeResult(a)
		temporaltest.RequireAppError(t, err, activity.ErrTypePayloadMismatch, false)
		require.ErrorContains(t, err, "payload mismatch for ", "A got something other than the receipt's refusal: B's outcome?")

		require.NoError(t, stale.Signal(syscall.SIGCONT))
		stale.awaitLogged(logFencedOut, 2*time.Minute)
		require.Equal(t, recorded, w.receiptRow("charge", ""), "the stale attempt wrote to B's receipt")
		// What the stale attempt returned (Temporal drops it: it timed out long ago).
		stale.awaitLogged(activity.ErrTypeFencedOut, time.Minute)

		charges := w.charges(o.ID)
		require.Len(t, charges, 1, "A's charge, made before the crash")
		require.Equal(t, o.Amount, charges[0].Amount)
		require.Equal(t, 2, w.ledger().RequestsByKey[charges[0].Token], "A's request and B's")
		require.Zero(t, w.pending())
	})
}

// loseReservation sets up row 20 on a Postgres of the test's own: A's QuickCharge reserved the
// key, the provider applied A's charge, A's worker is paused (SIGSTOP), and the reservation is
// lost in a crash. It returns the world, A's paused worker, the order and A's run.
func loseReservation(t *testing.T) (*world, *workerProc, payment.Order, client.WorkflowRun) {
	t.Helper()
	cluster := newCluster(t)
	w := newWorld(t, worldOptions{dbURL: cluster.url})
	migrate(t, w)
	lose := cluster.checkpoint()

	stale := w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "slow=1s" // long enough to pause A while the provider holds its request
	a, err := w.temporal.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: o.ID + "-a", TaskQueue: w.queue}, "QuickCharge", o)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(w.ledger().RequestsByKey) > 0 }, 30*time.Second, 10*time.Millisecond,
		"the charge never reached the provider")
	require.NoError(t, stale.Signal(syscall.SIGSTOP))
	require.Len(t, w.receiptRows("charge", ""), 1, "A's reservation")
	// The provider applies A's charge while A sleeps (a duplicate while it is in flight would
	// get 409s and come again).
	require.Eventually(t, func() bool { return len(w.charges(o.ID)) == 1 }, 30*time.Second, 20*time.Millisecond)

	lose()
	w.reconnect()
	require.Empty(t, w.receiptRows("charge", ""), "the reservation survived: the test proves nothing")
	return w, stale, o, a
}

// migrate creates the receipts and the sample's tables in the world's database, as the worker
// would at its start.
func migrate(t *testing.T, w *world) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), w.dbURL)
	require.NoError(t, err)
	defer pool.Close()
	store, err := activity.NewStore(pool, &activity.Config{Schema: w.schema})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	require.NoError(t, payment.Migrate(context.Background(), pool))
}
