package activity_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// stepRun is what forwardThenCompensate runs: the activity Forward under the step key Step, with
// Arg; with Compensate set, then the activity Compensation under keys.WithCompensation, as
// saga.Saga.Step does once the saga compensates.
type stepRun struct {
	Step, Forward, Compensation string
	Arg                         any
	Compensate                  bool
}

// forwardThenCompensate runs r, each activity with one attempt. It returns the forward
// activity's error when it does not compensate, else the compensation's.
func forwardThenCompensate(ctx workflow.Context, r stepRun) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	sctx, k, err := keys.StepKey(ctx, r.Step)
	if err != nil {
		return err
	}
	forwardErr := workflow.ExecuteActivity(sctx, r.Forward, r.Arg).Get(ctx, nil)
	if !r.Compensate {
		return forwardErr
	}
	cctx, _, err := keys.WithCompensation(ctx, k, r.Compensation)
	if err != nil {
		return err
	}
	return workflow.ExecuteActivity(cctx, r.Compensation, r.Arg).Get(ctx, nil)
}

// runStep runs r in a fresh test environment under workflow ID id, which gives its steps the
// same keys in each run, as a Reset to the start does; register registers the activities.
func runStep(t *testing.T, id string, r stepRun, register func(*testsuite.TestWorkflowEnvironment)) error {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	register(env)
	env.RegisterWorkflow(forwardThenCompensate)
	env.ExecuteWorkflow(forwardThenCompensate, r)
	require.True(t, env.IsWorkflowCompleted())
	return env.GetWorkflowError()
}

// requireCompensated fails t unless err is the non-retryable tempotent.Compensated.
func requireCompensated(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.Equal(t, activity.ErrTypeCompensated, appErr.Type(), "%v", err)
	require.True(t, appErr.NonRetryable(), "%v", err)
	require.Contains(t, appErr.Error(), "was compensated by")
}

// A forward step whose compensation completed is not run again, nor replayed as if it stood,
// when a Reset re-runs the workflow with the same keys: its receipt left unresolved (the charge
// may have landed after its attempt gave up) would otherwise be taken over and the charge made,
// or found, again; a completed one would replay "charged" for a charge that was refunded. The
// attempt fails for good with tempotent.Compensated and calls nothing.
func TestForwardStepAfterItsCompensationCompleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		firstCharge error // what the charge's first attempt returns
		tx          bool  // the charge is a local mutation (RegisterTx)
	}{
		{"Unresolved", errors.New("read tcp: i/o timeout"), false}, // ambiguous: the receipt stays pending, effect possible
		{"Completed", nil, false},
		{"CompletedTx", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, nil)
			var charges, refunds atomic.Int32
			charge := func(ctx context.Context, req ChargeRequest) (string, error) {
				if charges.Add(1) == 1 && tc.firstCharge != nil {
					return "", tc.firstCharge
				}
				return "ch_1", nil
			}
			register := func(env *testsuite.TestWorkflowEnvironment) {
				opts := activity.Options{DownstreamDeduplicates: true}
				if tc.tx {
					require.NoError(t, activity.RegisterTx(env, s, "Charge", func(ctx context.Context, _ pgx.Tx, req ChargeRequest) (string, error) {
						return charge(ctx, req)
					}, opts))
				} else {
					require.NoError(t, activity.Register(env, s, "Charge", charge, opts))
				}
				require.NoError(t, activity.Register(env, s, "Refund", func(ctx context.Context, req ChargeRequest) (string, error) {
					refunds.Add(1)
					return "refunded", nil
				}, opts))
			}
			r := stepRun{Step: "charge", Forward: "Charge", Compensation: "Refund", Arg: ChargeRequest{Order: "o-1", Amount: 100}, Compensate: true}
			require.NoError(t, runStep(t, "wf-compensated", r, register), "the refund did not complete")
			require.EqualValues(t, 1, charges.Load())
			require.EqualValues(t, 1, refunds.Load())

			r.Compensate = false // a Reset to the start: the charge step runs again under its key
			requireCompensated(t, runStep(t, "wf-compensated", r, register),
				"the charge step ran again after its compensation completed (charge calls: %d)", charges.Load())
			require.EqualValues(t, 1, charges.Load(), "the charge was called again after its compensation completed")
		})
	}
}

// A plain batch activity has no receipt of its own: its items' receipts, completed, would replay
// as paid after its compensation reversed them. ForEach refuses the batch as compensated in
// its first statement, and runs and replays no item.
func TestForEachAfterTheBatchsCompensationCompleted(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	payees := payeesN(3)
	register := func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterActivityWithOptions(payOut(s, p, 1), sdkactivity.RegisterOptions{Name: "PayOut"})
		require.NoError(t, activity.Register(env, s, "Unpay", func(ctx context.Context, payees []Payee) (string, error) {
			return "reversed", nil
		}, activity.Options{DownstreamDeduplicates: true}))
	}
	r := stepRun{Step: "payout", Forward: "PayOut", Compensation: "Unpay", Arg: payees, Compensate: true}
	require.NoError(t, runStep(t, "wf-compensated-batch", r, register))
	p.requireEachPaidOnce(t, payees)
	requests := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, r := range p.requests {
			n += r
		}
		return n
	}
	before := requests()

	r.Compensate = false
	requireCompensated(t, runStep(t, "wf-compensated-batch", r, register),
		"the batch replayed its items as paid after its compensation completed")
	require.Equal(t, before, requests(), "an item was called again")
}
