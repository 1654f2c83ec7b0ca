//go:build unix

package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/samples/payment"
)

// Row 1: the worker is killed after the provider charged, before the receipt is completed.
// The next attempt takes over once the lease ends, calls again with the same token, and the
// provider answers with the first charge: one charge, and the saga sees it.
func TestRow01KilledAfterChargeBeforeReceipt(t *testing.T) {
	w := newWorld(t, worldOptions{})
	o := w.order("o")
	run, token := w.killAfterCharge(o)

	second := w.startWorker()
	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	charges := w.charges(o.ID)
	require.Len(t, charges, 1, "a second charge")
	require.Equal(t, charges[0].ID, r.ChargeID, "the retry did not return the first charge")
	require.Equal(t, 2, w.ledger().RequestsByKey[token], "the takeover did not call with the same key")
	rc := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StateCompleted, rc.State)
	require.Equal(t, int64(2), rc.Fence, "not one takeover")
	require.Equal(t, 2, rc.Attempts)
	require.Equal(t, 1, second.logged(logTookOver), "the second worker did not take the receipt over")
	require.Zero(t, w.pending())
}

// killAfterCharge starts a worker that stops after the provider charged o, before the receipt
// is completed, checks that it charged, and kills it. It returns the saga's run and the charge's
// token. extra are more environment assignments for the worker.
func (w *world) killAfterCharge(o payment.Order, extra ...string) (client.WorkflowRun, string) {
	w.t.Helper()
	first := w.startWorker(append(extra, failpoint.EnvVar+"="+failpoint.AfterDownstream+"=pause")...)
	run := w.saga(o)
	first.waitFor("failpoint "+failpoint.AfterDownstream+" reached", 30*time.Second)
	charges := w.charges(o.ID)
	require.Len(w.t, charges, 1, "the provider had not charged when the worker stopped")
	first.Kill()
	return run, charges[0].Token
}

// Row 2: the worker is killed after the receipt was completed, before Temporal heard of it.
// The retry replays the receipt: no provider call, and the result Temporal records is the
// stored payload, byte for byte.
func TestRow02KilledAfterReceiptBeforeReport(t *testing.T) {
	w := newWorld(t, worldOptions{})
	first := w.startWorker(failpoint.EnvVar + "=" + failpoint.AfterComplete + "=pause")
	o := w.order("o")
	run := w.saga(o)
	first.waitFor("failpoint "+failpoint.AfterComplete+" reached", 30*time.Second)
	first.Kill()

	w.startWorker()
	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	require.Len(t, w.charges(o.ID), 1)
	require.Equal(t, 1, w.ledger().RequestsByKey[stepToken(r, "charge")], "the replay called the provider")

	_, _, stored := w.receipt("charge", "/charge#1")
	require.NotNil(t, stored)
	reported := activityResult(t, w, run, "Charge")
	require.Equal(t, stored.GetData(), reported.GetData(), "the replayed result is not the stored payload")
	require.Equal(t, stored.GetMetadata(), reported.GetMetadata())
	require.Zero(t, w.pending())
}

// Row 3: the worker is killed after the receipt was reserved, before the provider call. The
// next attempt takes over once the lease ends: one charge, nothing wedged.
func TestRow03KilledAfterReserveBeforeCall(t *testing.T) {
	w := newWorld(t, worldOptions{})
	first := w.startWorker(failpoint.EnvVar + "=" + failpoint.AfterReserve + "=pause")
	o := w.order("o")
	run := w.saga(o)
	first.waitFor("failpoint "+failpoint.AfterReserve+" reached", 30*time.Second)
	require.Empty(t, w.charges(o.ID))
	first.Kill()

	second := w.startWorker()
	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	require.Len(t, w.charges(o.ID), 1)
	require.Equal(t, 1, w.ledger().RequestsByKey[stepToken(r, "charge")])
	rc := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StateCompleted, rc.State)
	require.Equal(t, int64(2), rc.Fence, "the second attempt did not take over")
	require.Equal(t, 2, rc.Attempts)
	require.Equal(t, 1, second.logged(logTookOver), "the second worker did not take the receipt over")
	require.Zero(t, w.pending())
}
