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

// chargeThenRefund charges under the step key "charge"; with refund set it then runs the
// charge's compensation under keys.WithCompensation, as saga.Step does once the step failed.
// Each activity has one attempt.
func chargeThenRefund(ctx workflow.Context, req ChargeRequest, refund bool) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	sctx, k, err := keys.StepKey(ctx, "charge")
	if err != nil {
		return err
	}
	chargeErr := workflow.ExecuteActivity(sctx, "Charge", req).Get(ctx, nil)
	if !refund {
		return chargeErr
	}
	cctx, _, err := keys.WithCompensation(ctx, k, "Refund")
	if err != nil {
		return err
	}
	return workflow.ExecuteActivity(cctx, "Refund", req).Get(ctx, nil)
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
			run := func(refund bool) *testsuite.TestWorkflowEnvironment {
				var suite testsuite.WorkflowTestSuite
				env := suite.NewTestWorkflowEnvironment()
				env.SetTestTimeout(30 * time.Second)
				// The same workflow ID in each run: the keys a Reset re-run gets.
				env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "wf-compensated-" + tc.name})
				env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
				opts := activity.Options{DownstreamDeduplicates: true}
				charge := func(ctx context.Context, req ChargeRequest) (string, error) {
					if charges.Add(1) == 1 && tc.firstCharge != nil {
						return "", tc.firstCharge
					}
					return "ch_1", nil
				}
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
				env.RegisterWorkflow(chargeThenRefund)
				env.ExecuteWorkflow(chargeThenRefund, ChargeRequest{Order: "o-1", Amount: 100}, refund)
				require.True(t, env.IsWorkflowCompleted())
				return env
			}

			first := run(true)
			require.NoError(t, first.GetWorkflowError(), "the refund did not complete")
			require.EqualValues(t, 1, charges.Load())
			require.EqualValues(t, 1, refunds.Load())

			again := run(false) // a Reset to the start: the charge step runs again under its key
			err := again.GetWorkflowError()
			require.Error(t, err, "the charge step ran again after its compensation completed (charge calls: %d)", charges.Load())
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr), "%v", err)
			require.Equal(t, activity.ErrTypeCompensated, appErr.Type(), "%v", err)
			require.True(t, appErr.NonRetryable(), "%v", err)
			require.Contains(t, appErr.Error(), "was compensated by")
			require.EqualValues(t, 1, charges.Load(), "the charge was called again after its compensation completed")
		})
	}
}

// payOutThenUndo runs the plain batch activity PayOut under the step key "payout"; with undo set
// it then runs its compensation Unpay under keys.WithCompensation.
func payOutThenUndo(ctx workflow.Context, payees []Payee, undo bool) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	sctx, k, err := keys.StepKey(ctx, "payout")
	if err != nil {
		return err
	}
	if err := workflow.ExecuteActivity(sctx, "PayOut", payees).Get(ctx, nil); err != nil || !undo {
		return err
	}
	cctx, _, err := keys.WithCompensation(ctx, k, "Unpay")
	if err != nil {
		return err
	}
	return workflow.ExecuteActivity(cctx, "Unpay", payees).Get(ctx, nil)
}

// A plain batch activity has no receipt of its own: its items' receipts, completed, would replay
// as paid after its compensation reversed them. ForEach refuses the batch as compensated in
// its first statement, and runs and replays no item.
func TestForEachAfterTheBatchsCompensationCompleted(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	payees := payeesN(3)
	run := func(undo bool) *testsuite.TestWorkflowEnvironment {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestWorkflowEnvironment()
		env.SetTestTimeout(30 * time.Second)
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "wf-compensated-batch"})
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
		env.RegisterActivityWithOptions(payOut(s, p, 1), sdkactivity.RegisterOptions{Name: "PayOut"})
		require.NoError(t, activity.Register(env, s, "Unpay", func(ctx context.Context, payees []Payee) (string, error) {
			return "reversed", nil
		}, activity.Options{DownstreamDeduplicates: true}))
		env.RegisterWorkflow(payOutThenUndo)
		env.ExecuteWorkflow(payOutThenUndo, payees, undo)
		require.True(t, env.IsWorkflowCompleted())
		return env
	}
	require.NoError(t, run(true).GetWorkflowError())
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

	err := run(false).GetWorkflowError()
	require.Error(t, err, "the batch replayed its items as paid after its compensation completed")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.Equal(t, activity.ErrTypeCompensated, appErr.Type(), "%v", err)
	require.True(t, appErr.NonRetryable(), "%v", err)
	require.Equal(t, before, requests(), "an item was called again")
}
