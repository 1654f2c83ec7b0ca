package saga_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/sagamodel"
	"github.com/tempotent/tempotent/saga"
)

// A workflow reset after its saga compensated a step whose outcome was unknown. The charge is
// held by the provider past its attempts' timeouts and lands later; the saga compensates, and
// the refund, once the charge has settled, finds and refunds it. The saga ends compensated.
// Then the workflow is reset to its start: the same keys, so the charge's receipt — pending, its
// outcome never known — would be taken over and the provider would answer with the charge that
// landed, and the saga would go on to reserve and ship an order whose charge was refunded. The
// charge step fails instead (tempotent.Compensated, nothing called), the saga compensates, its
// completed compensations replay, and it ends compensated again.
func TestResetAfterCompensatedHeldCharge(t *testing.T) {
	t.Parallel()
	for _, parallel := range []bool{false, true} {
		name := map[bool]string{false: "Sequential", true: "Parallel"}[parallel]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := exploreStore(t)
			x := &explorer{store: store, op: operatorOn(t, store), p: sagamodel.NewProvider()}
			pl := sagamodel.Plan{ID: "reset-held-" + name, HoldCharge: true, Hold: exploreSettle / 6, Lag: exploreSettle / 4,
				ChargeTimeout: exploreChargeTimeout, Options: saga.Options{CompensationOptions: roomToSettle, Parallel: parallel}}
			first, err := x.run(pl, false)
			require.NoError(t, err)
			require.Equal(t, saga.StateCompensated, first.Status)
			require.Equal(t, saga.OutcomeUnknown, first.Steps[0].Outcome)
			x.p.Drain()
			charged, refunds, _ := x.p.ChargeOf(first.Steps[0].Token)
			require.True(t, charged)
			require.Equal(t, 1, refunds)
			before := x.p.Calls(pl.ID)

			again, err := x.run(pl, false) // as after a Reset to the start: the same keys
			require.NoError(t, err)
			calls := x.p.Calls(pl.ID)
			require.Equal(t, saga.StateCompensated, again.Status, "after the reset: %+v; provider calls %v", again, calls)
			require.Zero(t, calls[pl.ID+"/Reserve"], "reserved an order whose charge was refunded")
			require.Zero(t, calls[pl.ID+"/Ship"], "shipped an order whose charge was refunded")
			require.Equal(t, before, calls, "the re-run reached the provider")
			require.Contains(t, again.Steps[0].Error, activity.ErrTypeCompensated)
			require.Equal(t, saga.OutcomeUnknown, again.Steps[0].Outcome, "a compensated step's effect may have happened")
			require.Equal(t, saga.CompensationCompleted, again.Steps[0].CompensationState)
			charges, refunded := x.p.Totals()
			require.Equal(t, charges, refunded, "refunds ≠ charges")
		})
	}
}
