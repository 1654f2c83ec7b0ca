//go:build unix

package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/sagamodel"
	"github.com/tempotent/tempotent/saga"
)

// Row 32: a workflow reset after its saga compensated a step whose outcome was unknown. The
// provider holds every charge attempt past its timeout and applies the first later; the saga
// compensates, and the refund, once the charge has settled, finds it and refunds it. The saga
// ends compensated, the charge's receipt still pending (its outcome never recorded). Then an
// operator resets the workflow to its start with `temporal workflow reset`: the same keys. The
// re-run's charge must not take its receipt over (the provider would answer with the charge
// that landed, and the saga would reserve and ship an order whose charge was refunded): it
// fails as tempotent.Compensated, calls nothing, and the saga compensates again, its refund
// replaying.
func TestRow32ResetAfterCompensatedUnknownStep(t *testing.T) {
	c := newCompWorld(t)
	// The charge lands 1.5 s after its first attempt timed out: after the second attempt
	// (which hears "in progress" and is the last) and within the settle time (compSettle)
	// after it, as the downstream promises.
	pl := sagamodel.Plan{ID: "row32-" + c.schema, HoldCharge: true, ChargeTimeout: time.Second, Hold: 1500 * time.Millisecond,
		Lag: 200 * time.Millisecond}
	run := c.start(pl)
	first := c.result(run)
	require.Equal(t, saga.StateCompensated, first.Status)
	require.Equal(t, saga.OutcomeUnknown, first.Steps[0].Outcome)
	c.p.Drain()
	charged, refunds, _ := c.p.ChargeOf(first.Steps[0].Token)
	require.True(t, charged, "the held charge did not land")
	require.Equal(t, 1, refunds)
	before := c.p.Calls(pl.ID)

	reset(t, c.w, pl.ID, "FirstWorkflowTask")
	again := shared.client.GetWorkflow(context.Background(), pl.ID, "")
	require.NotEqual(t, run.GetRunID(), again.GetRunID(), "reset did not start a new run")
	second := c.result(again)
	calls := c.p.Calls(pl.ID)
	require.Equal(t, saga.StateCompensated, second.Status, "after the reset: %+v; provider calls %v", second, calls)
	require.Equal(t, first.Steps[0].Token, second.Steps[0].Token, "the reset run has other keys")
	require.Contains(t, second.Steps[0].Error, activity.ErrTypeCompensated)
	require.Zero(t, calls[pl.ID+"/Reserve"], "reserved an order whose charge was refunded")
	require.Zero(t, calls[pl.ID+"/Ship"], "shipped an order whose charge was refunded")
	require.Equal(t, before, calls, "the reset run reached the provider")
	charges, refunded := c.p.Totals()
	require.Equal(t, charges, refunded)
}
