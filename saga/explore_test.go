package saga_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/sagamodel"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/saga"
)

// The compensation explorer runs seeded payment sagas (charge, reserve, ship: sagamodel.Saga)
// under Temporal's test environment against a model provider whose search lags its writes, as
// Stripe's does: a charge becomes visible to a refund only some time after it was made. Each saga's plan, drawn
// from its seed, mixes:
//
//   - a search lag, up to most of the downstream's settle time;
//   - a charge held in flight: the provider applies the request only after the attempt that sent
//     it timed out, so the saga sees an unknown outcome and compensates while the charge is still
//     on its way;
//   - a later step that fails at once (reserve or ship declined), so the refund runs right after
//     the charge completed, before the search shows it;
//   - compensations that fail for good (a refund refused while the account is blocked, a shipment
//     cancel the carrier rejects), which an operator fixes and re-arms (operator.Client.Rearm)
//     before signalling the workflow to compensate again;
//   - a re-execution of the finished saga as after a Reset to its start, which must change
//     nothing;
//   - compensations in reverse order or all at once.
//
// The invariants, checked once every charge in flight has landed:
//
//   - charges − refunds = the charges of the sagas that completed; no charge is refunded twice,
//     and every saga ends completed or compensated;
//   - no refund concluded "nothing to undo" (the saga's record that there was no charge) for a
//     charge that exists: a charge that was still in flight, or not yet visible to search, when
//     the refund looked;
//   - while a compensation has failed for good and waits for the operator, the others have run:
//     a refund neither waits on a failed shipment cancel nor is skipped;
//   - a re-armed compensation ran again under the same token, its receipt taken over under a
//     later fence and completed.
//
// TEMPOTENT_EXPLORE_SEED (default 1) picks the first saga's seed, TEMPOTENT_EXPLORE_SAGAS_N
// (default exploreSagasDefault) how many sagas run, exploreParallel at a time; a failing saga
// prints its seed and plan. Activities run in real time while workflow time is mocked, so the
// settle time is a few hundred milliseconds, and a run with the same seed draws the same plans,
// though not the same interleavings.
func TestExploreCompensations(t *testing.T) {
	t.Parallel()
	seed := uint64(exploreEnv("TEMPOTENT_EXPLORE_SEED", 1))
	n := exploreEnv("TEMPOTENT_EXPLORE_SAGAS_N", exploreSagasDefault)
	store := exploreStore(t)
	x := &explorer{store: store, op: operatorOn(t, store), p: sagamodel.NewProvider(), rearms: map[keys.Token]int64{}}

	plans := make([]sagamodel.Plan, n)
	for i := range plans {
		plans[i] = drawPlan(seed + uint64(i))
	}
	outcomes := make([]sagaOutcome, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range exploreParallel {
		wg.Go(func() {
			for i := range work {
				outcomes[i] = x.saga(plans[i])
			}
		})
	}
	for i := range plans {
		work <- i
	}
	close(work)
	wg.Wait()
	x.p.Drain() // every charge still in flight lands

	completed, failed := 0, false
	for i, o := range outcomes {
		pl := plans[i]
		report := func(format string, args ...any) {
			failed = true
			t.Errorf("explore: saga with seed %d (%+v): %s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_SAGAS_N=1 go test -race -run TestExploreCompensations ./saga/",
				pl.Seed, pl, fmt.Sprintf(format, args...), pl.Seed)
		}
		if o.err != nil {
			report("%v", o.err)
			continue
		}
		charged, refunds, nothing := x.p.ChargeOf(o.chargeToken)
		switch o.state.Status {
		case saga.StateCompleted:
			completed++
			if !charged || refunds != 0 {
				report("completed, but charged %t and refunded %d times", charged, refunds)
			}
		case saga.StateCompensated:
			if charged && refunds != 1 {
				report("compensated, but its charge was refunded %d times", refunds)
			}
		default:
			report("ended %q: %+v", o.state.Status, o.state)
		}
		if charged && nothing {
			report("a refund concluded 'nothing to undo' while the charge existed or was still landing")
		}
	}
	charges, refunds := x.p.Totals()
	require.Equal(t, completed, charges-refunds, "charges − refunds is not the completed sagas' charges")
	if !failed {
		t.Logf("explore: %d sagas from seed %d (%d completed, %d charges, %d refunds, %d re-armed compensations, %d re-executions), every invariant held",
			n, seed, completed, charges, refunds, len(x.rearms), countTrue(plans, func(pl sagamodel.Plan) bool { return pl.ReExecute }))
	}
}

const (
	// exploreSagasDefault keeps the explorer well under a minute in go test -race ./saga/.
	exploreSagasDefault = 24
	exploreParallel     = 4
	// exploreSettle is the model provider's settle time: a charge in flight lands, and a
	// charge becomes visible to search, within it.
	exploreSettle = 300 * time.Millisecond
	// exploreChargeTimeout is a held charge attempt's start-to-close timeout.
	exploreChargeTimeout = 250 * time.Millisecond
)

// drawPlan draws a saga's faults from its seed.
func drawPlan(seed uint64) sagamodel.Plan {
	rng := rand.New(rand.NewPCG(seed, 0x5a9a))
	p := sagamodel.Plan{Seed: seed, ID: fmt.Sprintf("explore-%d", seed), ChargeTimeout: exploreChargeTimeout}
	p.FailAt = []string{"", "reserve", "ship", "ship"}[rng.IntN(4)]
	p.HoldCharge = rng.IntN(4) == 0
	// A held charge lands Hold after its attempt ended and is visible Lag after that: both
	// within the settle time, as the downstream promises.
	p.Hold = time.Duration(rng.Int64N(int64(exploreSettle / 3)))
	p.Lag = time.Duration(rng.Int64N(int64(exploreSettle / 2)))
	for _, c := range []string{"Refund", "Release", "CancelShipment"} {
		if rng.IntN(4) == 0 {
			p.Broken = append(p.Broken, c)
		}
	}
	// A re-execution after a Reset takes the path the receipts replay. Where the first run saw
	// an unknown outcome (a held charge) and compensated it, the re-executed charge meets its
	// receipt still pending; it fails as compensated (tempotent.Compensated) instead of taking
	// it over, so the saga does not go on past the point where it compensated.
	p.ReExecute = rng.IntN(3) == 0
	p.Options = saga.Options{CompensationOptions: roomToSettle, Parallel: rng.IntN(3) == 0}
	return p
}

// sagaOutcome is how an explored saga ended.
type sagaOutcome struct {
	state       saga.State
	chargeToken string
	err         error
}

// explorer runs the sagas of one exploration against one store and one provider.
type explorer struct {
	store  *activity.Store
	op     *operator.Client // the operator's, on store's receipts
	p      *sagamodel.Provider
	mu     sync.Mutex
	rearms map[keys.Token]int64 // compensation token → fence when re-armed
}

// saga runs one plan: the saga, the operator's re-arms, and a re-execution.
func (x *explorer) saga(pl sagamodel.Plan) sagaOutcome {
	st, err := x.run(pl, true)
	if err != nil {
		return sagaOutcome{err: err}
	}
	out := sagaOutcome{state: st, chargeToken: st.Steps[0].Token}
	if err := x.checkRearmed(pl); err != nil {
		return sagaOutcome{err: err}
	}
	if pl.ReExecute {
		before := x.p.Calls(pl.ID)
		again, err := x.run(pl, false)
		if err != nil {
			return sagaOutcome{err: fmt.Errorf("re-executed as after a Reset: %w", err)}
		}
		if again.Status != st.Status {
			return sagaOutcome{err: fmt.Errorf("re-executed as after a Reset, it ended %q, not %q", again.Status, st.Status)}
		}
		if after := x.p.Calls(pl.ID); !maps.Equal(before, after) {
			return sagaOutcome{err: fmt.Errorf("re-executed as after a Reset, it reached the provider: %v, then %v", before, after)}
		}
	}
	return out
}

// run runs the saga in a fresh test environment. With operate, an operator fixes the cause of
// the compensations that failed for good, re-arms their receipts and signals the workflow, once
// it waits.
func (x *explorer) run(pl sagamodel.Plan, operate bool) (st saga.State, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("test environment panicked: %v", r)
		}
	}()
	env := modelEnv(x.store, x.p, pl)
	var opErr error
	if operate && len(pl.Broken) > 0 {
		// Mock time: the environment skips to the callback only once the workflow waits for
		// the signal, far later than any retry of a compensation.
		env.RegisterDelayedCallback(func() {
			if opErr = x.operate(pl); opErr == nil {
				env.SignalWorkflow(sagamodel.CompensateAgain, nil)
			}
		}, 1000*time.Hour)
	}
	env.ExecuteWorkflow(sagamodel.Saga, pl)
	if opErr != nil {
		return saga.State{}, opErr
	}
	if !env.IsWorkflowCompleted() {
		return saga.State{}, errors.New("the workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		return saga.State{}, err
	}
	err = env.GetWorkflowResult(&st)
	return st, err
}

// modelEnv is a test environment that runs sagamodel's saga for pl under its workflow ID.
func modelEnv(store *activity.Store, p *sagamodel.Provider, pl sagamodel.Plan) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Minute)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: pl.ID})
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	if err := sagamodel.Register(env, store, p, exploreSettle); err != nil {
		panic(err) // run recovers it into the saga's error
	}
	env.RegisterWorkflow(sagamodel.Saga)
	return env
}

// operate is the operator: check that the other compensations ran, fix the cause, then re-arm
// every compensation of the saga that failed for good.
func (x *explorer) operate(pl sagamodel.Plan) error {
	ctx := context.Background()
	page, err := x.op.Receipts(ctx, operator.Filter{WorkflowID: pl.ID})
	if err != nil {
		return err
	}
	for _, r := range page.Receipts {
		// The saga waits for the operator: every compensation that did not fail for good has
		// run, a refund that is not broken among them, whichever others failed.
		if r.ActivityType == "Charge" {
			if err := x.p.RefundRan(pl, string(r.Token)); err != nil {
				return err
			}
		}
	}
	x.p.Fix(pl.ID)
	for _, r := range page.Receipts {
		if r.State != operator.StateFailed || r.Compensates == "" {
			continue // a declined forward step stays declined
		}
		if _, err := x.op.Rearm(ctx, r.Token, operator.Rearming{By: "explorer", Reason: "account unblocked"}); err != nil {
			return fmt.Errorf("re-arm %s (%s): %w", r.Token, r.ActivityType, err)
		}
		x.mu.Lock()
		x.rearms[r.Token] = r.Fence
		x.mu.Unlock()
	}
	return nil
}

// checkRearmed checks that each compensation of pl's saga that the operator re-armed ran again
// under its token: taken over under a later fence, and completed.
func (x *explorer) checkRearmed(pl sagamodel.Plan) error {
	x.mu.Lock()
	rearms := maps.Clone(x.rearms)
	x.mu.Unlock()
	for tok, fence := range rearms {
		r, err := x.op.Receipt(context.Background(), tok)
		if err != nil {
			return err
		}
		if r.WorkflowID != pl.ID {
			continue
		}
		// Every attempt after the re-arm takes the receipt over (a compensation that waits for
		// its forward step to settle is retried many times): the fence is past the re-armed one.
		if r.Status != operator.StatusSucceeded || r.Fence <= fence {
			return fmt.Errorf("re-armed compensation %s (%s) is %s at fence %d, re-armed at fence %d: it did not run again", tok, r.ActivityType, r.Status, r.Fence, fence)
		}
	}
	return nil
}

func countTrue[T any](s []T, f func(T) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
}

func exploreEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
