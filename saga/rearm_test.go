package saga_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/sagamodel"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/saga"
)

// operatorOn is an operator client on the receipts of store, a store of exploreStore.
func operatorOn(t *testing.T, store *activity.Store) *operator.Client {
	t.Helper()
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: store.Config().Schema})
	require.NoError(t, err)
	return op
}

// exploreStore is a migrated store in a fresh schema, for the sagas of the model provider.
func exploreStore(t *testing.T) *activity.Store {
	t.Helper()
	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	return store
}

// Row 29 of FAULTS.md under the test environment (faults/ has it on the dev server): a refund
// right after the forward step completed, the provider's search lagging. The charge completes, the reservation is declined at
// once, and the refund asks the provider before its search shows the charge. "No charge" is not
// final while the charge is younger than the settle time: the refund is retried
// (ForwardUnsettled) until the search shows the charge, and refunds it once.
func TestRefundRightAfterChargeSearchLagging(t *testing.T) {
	t.Parallel()
	x := &explorer{store: exploreStore(t), p: sagamodel.NewProvider()}
	// In parallel, the refund runs at once; in reverse order it would first wait for the
	// release, whose declined forward step takes the settle time to be final.
	pl := sagamodel.Plan{ID: "row29", FailAt: "reserve", Lag: exploreSettle * 2 / 3,
		Options: saga.Options{CompensationOptions: roomToSettle, Parallel: true}}
	st, err := x.run(pl, false)
	require.NoError(t, err)
	op, p := operatorOn(t, x.store), x.p
	require.Equal(t, saga.StateCompensated, st.Status)
	charged, refunds, nothing := p.ChargeOf(st.Steps[0].Token)
	require.True(t, charged)
	require.False(t, nothing, "the refund concluded 'no charge' while the provider's search lagged")
	require.Equal(t, 1, refunds, "the charge was not refunded once")
	// The guard: the refund heard "no charge" first and was retried as unsettled.
	ctx := context.Background()
	refund, err := op.Receipt(ctx, keys.Token(st.Steps[0].CompensationToken))
	require.NoError(t, err)
	require.Equal(t, operator.StatusSucceeded, refund.Status)
	require.Greater(t, refund.Attempts, 1, "the refund found the charge at once: the search did not lag")
	require.Greater(t, p.Calls(pl.ID)["row29/Refund"], 1)
}

// Row 30 of FAULTS.md under the test environment (faults/ has it on the dev server, the operator
// using the tempotent and temporal commands): a compensation failed for good, fixed, re-armed by
// an operator. The carrier declines the shipment and rejects its cancellation for good; the
// release and the refund still run. The operator fixes the cause, re-arms the cancellation's
// receipt and signals the workflow, which compensates again: the cancellation runs again under
// the same token, the completed compensations are not run again, and the saga ends compensated.
func TestCompensationFailedForGoodRearmedRunsAgain(t *testing.T) {
	t.Parallel()
	store, p := exploreStore(t), sagamodel.NewProvider()
	op := operatorOn(t, store)
	pl := sagamodel.Plan{ID: "row30", FailAt: "ship", Broken: []string{"CancelShipment"},
		Options: saga.Options{CompensationOptions: roomToSettle}}
	ctx := context.Background()
	env := modelEnv(store, p, pl)
	var (
		waiting      saga.State
		failed       operator.Receipt
		callsAtRearm map[string]int
		rearmErr     error
	)
	env.RegisterDelayedCallback(func() {
		// The workflow waits for the operator. What the operator finds:
		q, err := env.QueryWorkflow(saga.QueryTypeDefault)
		if err == nil {
			err = q.Get(&waiting)
		}
		if err == nil {
			failed, err = op.Receipt(ctx, keys.Token(waiting.Steps[2].CompensationToken))
		}
		callsAtRearm = p.Calls(pl.ID)
		p.Fix(pl.ID) // the carrier's credentials are fixed
		if err == nil {
			_, err = op.Rearm(ctx, failed.Token, operator.Rearming{By: "ops@example.com", Reason: "INC-30: carrier credentials rotated"})
		}
		rearmErr = err
		env.SignalWorkflow(sagamodel.CompensateAgain, nil)
	}, 1000*time.Hour)
	env.ExecuteWorkflow(sagamodel.Saga, pl)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, rearmErr)
	require.NoError(t, env.GetWorkflowError())
	var st saga.State
	require.NoError(t, env.GetWorkflowResult(&st))

	// Before the operator: the cancellation failed for good, and the others ran all the same.
	require.Equal(t, saga.StateCompensationFailed, waiting.Status)
	require.Equal(t, saga.CompensationFailed, waiting.Steps[2].CompensationState)
	require.Equal(t, saga.CompensationCompleted, waiting.Steps[1].CompensationState, "the release waited on the failed cancellation")
	require.Equal(t, saga.CompensationCompleted, waiting.Steps[0].CompensationState, "the refund waited on the failed cancellation")
	require.Equal(t, operator.StatusFailed, failed.Status)
	// After: compensated, the cancellation run again under its token, nothing else again.
	require.Equal(t, saga.StateCompensated, st.Status)
	require.Equal(t, waiting.Steps[2].CompensationToken, st.Steps[2].CompensationToken)
	after, err := op.Receipt(ctx, failed.Token)
	require.NoError(t, err)
	require.Equal(t, operator.StatusSucceeded, after.Status, "the re-armed cancellation's new outcome was not recorded")
	require.Greater(t, after.Fence, failed.Fence, "the re-armed cancellation was not taken over")
	calls := p.Calls(pl.ID)
	require.Greater(t, calls["row30/CancelShipment"], callsAtRearm["row30/CancelShipment"], "the cancellation did not run again")
	require.Equal(t, callsAtRearm["row30/Refund"], calls["row30/Refund"], "the completed refund ran again")
	require.Equal(t, callsAtRearm["row30/Release"], calls["row30/Release"], "the completed release ran again")
	charged, refunds, _ := p.ChargeOf(st.Steps[0].Token)
	require.True(t, charged)
	require.Equal(t, 1, refunds)
	audit, err := op.Audit(ctx, failed.Token)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, operator.AuditRearm, audit[0].Action)
	require.Equal(t, "ops@example.com", audit[0].Actor)
}
