//go:build unix

package faults_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/samples/payment"
)

// Row 13: the worker is killed during a compensation, after the provider refunded. The retried
// compensation replays under its own key: one refund for the charge, and no cancellation of a
// shipment that never happened.
func TestRow13KilledDuringCompensation(t *testing.T) {
	w := newWorld(t, worldOptions{})
	first := w.startWorker(failpoint.EnvVar + "=" + failpoint.InCompensation + "=pause")
	o := w.order("o")
	o.Address = "nowhere" // the carrier refuses: refund and release
	run := w.saga(o)
	first.waitFor("failpoint "+failpoint.InCompensation+" reached", 30*time.Second)
	require.Equal(t, 1, w.refunds(o.ID), "the refund had not happened when the worker stopped")
	first.Kill()

	second := w.startWorker()
	r := w.result(run)
	require.Equal(t, payment.StatusCompensated, r.Status)
	require.Len(t, w.charges(o.ID), 1)
	require.Equal(t, 1, w.refunds(o.ID), "a compensation ran twice")
	require.Empty(t, w.carrierLedger().Refunds, "a shipment that never happened was cancelled")
	// The retried refund took the compensation's receipt over and asked again under the
	// compensation's own key, which the provider answered with the first refund.
	var compToken string
	for _, s := range r.Saga.Steps {
		if s.Name == "charge" {
			compToken = s.CompensationToken
		}
	}
	require.Equal(t, 2, w.ledger().RequestsByKey[compToken], "the retried refund did not use the compensation's key")
	require.Equal(t, 1, second.logged(logTookOver), "the retried refund did not take over the compensation's receipt")
	require.Zero(t, w.pending())
}

// Row 21: a compensation runs while the forward call is still in flight. The first 19 charge
// attempts get a 500; the provider holds the 20th, the last the sample's retry policy allows,
// past its 10 s timeout and applies it 7 s later, within the sample's settle time (15 s). The
// saga compensates as soon as the last attempt timed out, while the charge is still on its way:
// the refund must not conclude "nothing to undo" (and replay that forever) but retry with
// ForwardUnsettled until the charge has landed, then refund it once.
func TestRow21CompensationWhileForwardInFlight(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "fail_500=19,slow=17s"
	run := w.saga(o)
	r := w.result(run)
	require.Equal(t, payment.StatusCompensated, r.Status)
	token := stepToken(r, "charge")
	require.Equal(t, 20, w.ledger().RequestsByKey[token], "the charge did not use its last attempt")
	charges := w.charges(o.ID)
	require.Len(t, charges, 1, "the held charge did not land")
	require.Equal(t, 1, w.refunds(o.ID), "the charge that landed after the saga gave up was not refunded once")

	refund := activityStarted(t, w, run, "Refund")
	require.Greater(t, refund.GetAttempt(), int32(1), "the refund found the charge at once: the test did not compensate while it was in flight")
	require.Equal(t, activity.ErrTypeForwardUnsettled, refund.GetLastFailure().GetApplicationFailureInfo().GetType(),
		"the refund was not retried as unsettled")
	// Nobody recorded the charge's outcome: its last attempt timed out, and no attempt came
	// after. Its receipt stays unresolved (pending, an effect possible) for an operator, and
	// is never purged; it is the only one.
	rc := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StatePending, rc.State)
	require.True(t, rc.EffectPossible)
	require.Equal(t, 1, w.pending())
}

// Row 14: the workflow is reset to before the charge with `temporal workflow reset`. The new
// run has a new run ID and the same epoch (the chain's FirstRunID, which Reset keeps), so the
// workflow-scope keys are the same: the receipts replay and the provider is not called again.
func TestRow14ResetAfterCharge(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	run := w.saga(o)
	first := w.result(run)
	require.Equal(t, payment.StatusCompleted, first.Status)
	before := w.receiptCount()

	reset(t, w, run.GetID(), "FirstWorkflowTask")
	again := w.temporal.client.GetWorkflow(context.Background(), run.GetID(), "")
	require.NotEqual(t, run.GetRunID(), again.GetRunID(), "reset did not start a new run")
	second := w.result(again)
	require.Equal(t, payment.StatusCompleted, second.Status)
	require.Equal(t, first.ChargeID, second.ChargeID)
	require.Len(t, w.charges(o.ID), 1, "the reset charged again")
	require.Equal(t, 1, w.ledger().RequestsByKey[stepToken(first, "charge")], "the reset run called the provider")
	require.Len(t, w.carrierLedger().Charges, 1, "the reset booked a second shipment")
	// The guard itself: the reset run's keys are the first run's (the epoch, not the RunID),
	// so it found every receipt and wrote none.
	require.Len(t, w.receiptRows("charge", ""), 1, "the reset run's charge has a receipt of its own")
	require.Equal(t, before, w.receiptCount(), "the reset run wrote receipts of its own")
}

// Row 9: a late retry after the receipt was purged. The receipts are purged, then the workflow
// is reset: the charge runs again, with the same token, and the provider's own key memory
// answers with the first charge. No second effect.
func TestRow09LateRetryAfterPurge(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	run := w.saga(o)
	first := w.result(run)
	require.Equal(t, payment.StatusCompleted, first.Status)

	_, err := w.db().Exec(context.Background(), "UPDATE "+w.schema+".receipts SET expires_at = now() - interval '1 second'")
	require.NoError(t, err)
	purged := purge(t, w)
	require.Positive(t, purged)

	reset(t, w, run.GetID(), "FirstWorkflowTask")
	second := w.result(w.temporal.client.GetWorkflow(context.Background(), run.GetID(), ""))
	require.Equal(t, payment.StatusCompleted, second.Status)
	require.Equal(t, first.ChargeID, second.ChargeID)
	require.Len(t, w.charges(o.ID), 1, "a second charge after the receipt was purged")
	require.Equal(t, 2, w.ledger().RequestsByKey[stepToken(first, "charge")], "the provider was not asked again: the receipt was not purged")
}

// reset resets a workflow with the temporal CLI, as an operator would.
func reset(t *testing.T, w *world, workflowID, resetType string) {
	t.Helper()
	out, err := exec.Command(temporalBin, "workflow", "reset", "--address", w.temporal.addr,
		"--workflow-id", workflowID, "--type", resetType, "--reason", "fault test").CombinedOutput()
	require.NoError(t, err, "temporal workflow reset: %s", out)
}

// purge runs the operator's Purge over the test's receipts.
func purge(t *testing.T, w *world) int64 {
	t.Helper()
	op, err := operator.NewClient(w.db(), operator.Config{Schema: w.schema})
	require.NoError(t, err)
	n, err := op.Purge(context.Background(), 0)
	require.NoError(t, err)
	return n
}
