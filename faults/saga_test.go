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
	first.kill()

	w.startWorker()
	r := w.result(run)
	require.Equal(t, payment.StatusCompensated, r.Status)
	require.Len(t, w.charges(o.ID), 1)
	require.Equal(t, 1, w.refunds(o.ID), "a compensation ran twice")
	require.Empty(t, w.carrierLedger().Refunds, "a shipment that never happened was cancelled")
	require.Zero(t, w.pending())
}

// Row 14: the workflow is reset to before the charge with `temporal workflow reset`. The new
// run has a new run ID and the same OriginalRunID, so the reset-safe keys are the same: the
// receipts replay and the provider is not called again.
func TestRow14ResetAfterCharge(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	run := w.saga(o)
	first := w.result(run)
	require.Equal(t, payment.StatusCompleted, first.Status)

	reset(t, w, run.GetID(), "FirstWorkflowTask")
	again := w.temporal.client.GetWorkflow(context.Background(), run.GetID(), "")
	require.NotEqual(t, run.GetRunID(), again.GetRunID(), "reset did not start a new run")
	second := w.result(again)
	require.Equal(t, payment.StatusCompleted, second.Status)
	require.Equal(t, first.ChargeID, second.ChargeID)
	require.Len(t, w.charges(o.ID), 1, "the reset charged again")
	require.Equal(t, 1, w.ledger().RequestsByKey[stepToken(first, "charge")], "the reset run called the provider")
	require.Len(t, w.carrierLedger().Charges, 1, "the reset booked a second shipment")
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

// purge runs the store's own Purge over the test's receipts.
func purge(t *testing.T, w *world) int64 {
	t.Helper()
	store, err := activity.NewStore(w.db(), &activity.Config{Schema: w.schema})
	require.NoError(t, err)
	n, err := store.Purge(context.Background(), 0)
	require.NoError(t, err)
	return n
}
