package faults_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/samples/payment"
)

// Row 10: the start-to-close timeout fires while the first attempt still runs (a provider slower
// than the 10 s timeout). The attempts are fenced: one charge, and the first attempt's late
// outcome does not overwrite the receipt.
func TestRow10TimeoutWhileFirstAttemptRuns(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "slow=12s"
	r := w.result(w.saga(o))
	require.Equal(t, payment.StatusCompleted, r.Status)
	charges := w.charges(o.ID)
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, r.ChargeID)
	state, fence, _ := w.receipt("charge", "/charge#1")
	require.Equal(t, activity.StateCompleted, state)
	require.GreaterOrEqual(t, fence, int64(2), "the second attempt did not take over")
	require.Zero(t, w.pending())
}

// Row 11: a worker paused (SIGSTOP) longer than its lease, then resumed (SIGCONT). Another worker
// takes over meanwhile; the resumed one's completion is fenced out: one charge.
func TestRow11PausedWorkerResumes(t *testing.T) {
	w := newWorld(t, worldOptions{})
	paused := w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "slow=2s"
	run := w.saga(o)
	require.Eventually(t, func() bool { return len(w.ledger().RequestsByKey) > 0 }, 30*time.Second, 20*time.Millisecond,
		"the charge never reached the provider")
	paused.signal(syscall.SIGSTOP)
	w.startWorker()

	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	paused.signal(syscall.SIGCONT)
	time.Sleep(3 * time.Second) // let the resumed worker try to record its outcome
	require.Len(t, w.charges(o.ID), 1)
	state, fence, _ := w.receipt("charge", "/charge#1")
	require.Equal(t, activity.StateCompleted, state)
	require.GreaterOrEqual(t, fence, int64(2))
	require.Zero(t, w.pending())
}

// Row 18: the Temporal server is SIGKILLed mid-run and restarted on the same database file.
// Workflows resume where they were, and every order is charged once.
func TestRow18TemporalServerKilled(t *testing.T) {
	port, err := freePort()
	require.NoError(t, err)
	db := filepath.Join(t.TempDir(), "temporal.db")
	server, err := startTemporal(db, port)
	require.NoError(t, err)
	t.Cleanup(func() { server.kill() })
	w := newWorld(t, worldOptions{temporal: server})
	w.startWorker()

	var orders []payment.Order
	for i := range 4 {
		o := w.order(string(rune('a' + i)))
		o.ChargeFaults = "slow=2s"
		w.saga(o)
		orders = append(orders, o)
	}
	time.Sleep(time.Second)
	server.kill() // SIGKILL, as the test's cleanup would
	restarted, err := startTemporal(db, port)
	require.NoError(t, err)
	*server = *restarted

	for _, o := range orders {
		r := w.result(server.client.GetWorkflow(context.Background(), o.ID, ""))
		require.Equal(t, payment.StatusCompleted, r.Status, o.ID)
		require.Len(t, w.charges(o.ID), 1, o.ID)
	}
	require.Zero(t, w.pending())
}
