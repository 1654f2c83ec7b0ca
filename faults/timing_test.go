//go:build unix

package faults_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/samples/payment"
)

// Row 10: the start-to-close timeout fires while the first attempt still runs (a provider slower
// than the 10 s timeout). The attempts are fenced: the ones that take over meet the first
// request still in flight at the provider (409) until it lands, then get its charge; one charge,
// and the first attempt's late outcome does not overwrite the receipt.
func TestRow10TimeoutWhileFirstAttemptRuns(t *testing.T) {
	w := newWorld(t, worldOptions{})
	worker := w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "slow=14s"
	r := w.result(w.saga(o))
	require.Equal(t, payment.StatusCompleted, r.Status)
	charges := w.charges(o.ID)
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, r.ChargeID)
	require.Positive(t, w.ledger().ConflictsByKey[charges[0].Token], "no attempt met the first one in flight at the provider")
	rc := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StateCompleted, rc.State)
	require.GreaterOrEqual(t, rc.Fence, int64(2), "the second attempt did not take over")
	require.Positive(t, worker.logged(logTookOver))
	require.Zero(t, w.pending())
}

// Row 11: a worker paused (SIGSTOP) longer than its lease, then resumed (SIGCONT). Another worker
// takes over meanwhile; the resumed one's completion is fenced out: one charge, and the receipt
// the other worker completed is not touched.
func TestRow11PausedWorkerResumes(t *testing.T) {
	w := newWorld(t, worldOptions{})
	paused := w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "slow=2s"
	run := w.saga(o)
	require.Eventually(t, func() bool { return len(w.ledger().RequestsByKey) > 0 }, 30*time.Second, 20*time.Millisecond,
		"the charge never reached the provider")
	require.NoError(t, paused.Signal(syscall.SIGSTOP))
	w.startWorker()

	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	completed := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StateCompleted, completed.State)
	require.GreaterOrEqual(t, completed.Fence, int64(2))
	require.NoError(t, paused.Signal(syscall.SIGCONT))
	paused.awaitLogged(logFencedOut, 2*time.Minute)
	require.Equal(t, completed, w.receiptRow("charge", "/charge#1"), "the resumed worker wrote to the receipt")
	require.Len(t, w.charges(o.ID), 1)
	require.Zero(t, w.pending())
}

// Row 18: the Temporal server is SIGKILLed mid-run and restarted on the same database file.
// Two kinds of work are in the air when it dies: four charges in flight on a live worker (their
// completions must land once the server is back), and one charge stranded by a worker killed
// after the provider charged but before the receipt was completed. The stranded charge is
// retried only because the restarted server still holds its start-to-close timer; the retry must
// present the same key, found from what the server persisted (the run and step in the activity's
// headers), so the provider answers with the first charge. Workflows resume; one charge each.
func TestRow18TemporalServerKilled(t *testing.T) {
	port, err := freeport.Get()
	require.NoError(t, err)
	db := filepath.Join(t.TempDir(), "temporal.db")
	server, err := startTemporal(db, port)
	require.NoError(t, err)
	t.Cleanup(func() { server.kill() })
	w := newWorld(t, worldOptions{temporal: server})

	stranded := w.order("stranded")
	w.killAfterCharge(stranded)

	w.startWorker()
	orders := []payment.Order{stranded}
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
		charges := w.charges(o.ID)
		require.Len(t, charges, 1, o.ID)
		require.Equal(t, charges[0].ID, r.ChargeID, o.ID)
		if o.ID == stranded.ID {
			require.Equal(t, 2, w.ledger().RequestsByKey[stepToken(r, "charge")],
				"the stranded charge was not retried with its first key")
		}
	}
	require.Zero(t, w.pending())
}
