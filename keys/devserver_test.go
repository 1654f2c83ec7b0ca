package keys_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/keys"
)

// keyLog records, per workflow ID, what each run of the Key activity got: its key's ID, or why it
// had none.
type keyLog struct {
	mu   sync.Mutex
	runs map[string][]string
}

func (l *keyLog) activity(ctx context.Context) (string, error) {
	k, err := keys.FromActivity(ctx)
	got := k.ID
	if err != nil {
		got = "refused: " + err.Error()
	}
	info := activity.GetInfo(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[info.WorkflowExecution.ID] = append(l.runs[info.WorkflowExecution.ID], got)
	return got, err
}

func (l *keyLog) of(workflowID string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.runs[workflowID]...)
}

// chainWorkflow keys one charge per run, then:
//   - stage 0 continues as new on the "plain" queue, whose worker lacks the interceptor;
//   - stage 1 (that worker) continues as new back to the "keyed" queue, without the epoch header;
//   - stage 2 fails its first two attempts, so that Temporal retries it.
//
// With mode "retry", stage 0 itself fails its first two attempts and finishes: the plain chain of
// a workflow retry.
func chainWorkflow(ctx workflow.Context, mode string, stage int) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	info := workflow.GetInfo(ctx)
	var got string
	if stage != 1 {
		err := workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), keyActivity).Get(ctx, &got)
		if err != nil {
			got = err.Error()
		}
	}
	switch {
	case mode == "retry" && info.Attempt < 3:
		return "", errors.New("this run fails after charging, so that Temporal retries the workflow")
	case mode == "retry":
		return got, nil
	case stage == 0:
		return "", workflow.NewContinueAsNewError(workflow.WithWorkflowTaskQueue(ctx, "plain"), "chain", mode, 1)
	case stage == 1:
		return "", workflow.NewContinueAsNewError(workflow.WithWorkflowTaskQueue(ctx, "keyed"), "chain", mode, 2)
	case info.Attempt < 3:
		return "", fmt.Errorf("attempt %d fails, so that Temporal retries the workflow: %s", info.Attempt, got)
	}
	return got, nil
}

// TestRetryOfARefusedContinueAsNewIsRefused: a run continued as new without the epoch header
// (its predecessor's worker lacked the interceptor) cannot tell its keys from the first run's, so
// it is refused them; so is every retry of it. A retry that fell back to the chain's FirstRunID
// would replay the first run's receipts: a charge that never happens.
func TestRetryOfARefusedContinueAsNewIsRefused(t *testing.T) {
	t.Parallel()
	c := devserver.ForTest(t, "../bin/temporal", client.Options{})
	log := &keyLog{runs: map[string][]string{}}
	retry := &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1, MaximumAttempts: 5}
	for queue, ic := range map[string][]interceptor.WorkerInterceptor{
		"keyed": {keys.NewInterceptor()},
		"plain": nil,
	} {
		w := worker.New(c, queue, worker.Options{Interceptors: ic})
		w.RegisterWorkflowWithOptions(chainWorkflow, workflow.RegisterOptions{Name: "chain"})
		w.RegisterActivityWithOptions(log.activity, activity.RegisterOptions{Name: keyActivity})
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
	// A workflow whose tasks fail on replay stays open: bound the wait, so that it fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	run := func(t *testing.T, id, mode string) string {
		t.Helper()
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "keyed", RetryPolicy: retry}, "chain", mode, 0)
		require.NoError(t, err)
		var got string
		require.NoError(t, r.Get(ctx, &got))
		return got
	}

	t.Run("ContinuedWithoutHeader", func(t *testing.T) {
		t.Parallel()
		run(t, "continued", "continue")
		got := log.of("continued")
		require.Len(t, got, 4, "stage 0 once, then stage 2's three attempts: %q", got)
		require.Regexp(t, `^wf:continued/[^/]+/charge#1$`, got[0])
		for i, g := range got[1:] {
			require.Regexp(t, `^refused: .*continued as new .*without tempotent's epoch header`, g,
				"attempt %d of the run continued without the header was keyed (the first run's key is %s)", i+1, got[0])
		}
	})

	t.Run("PlainRetryKeepsTheFirstRunsKey", func(t *testing.T) {
		t.Parallel()
		got := run(t, "retried", "retry")
		require.Equal(t, []string{got, got, got}, log.of("retried"), "a workflow retry must replay the first run's key")
	})
}

// parentWorkflow starts a child workflow that charges, under a workflow ID of its own derived
// from the parent's, then fails its first attempt (mode "retry") or waits for the signal
// "finish" (mode "reset"), so that the parent runs again and starts the child again.
func parentWorkflow(ctx workflow.Context, mode string) (string, error) {
	info := workflow.GetInfo(ctx)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: info.WorkflowExecution.ID + "/ship"})
	var got string
	if err := workflow.ExecuteChildWorkflow(keys.WithStep(cctx, "ship"), "charging-child").Get(ctx, &got); err != nil {
		return "", err
	}
	switch {
	case mode == "retry" && info.Attempt < 2:
		return "", errors.New("this run fails after its child charged, so that Temporal retries the workflow")
	case mode == "reset":
		workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	}
	return got, nil
}

func chargingChild(ctx workflow.Context) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var got string
	err := workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), keyActivity).Get(ctx, &got)
	return got, err
}

// TestParentRunAgainDoesNotChargeTwiceThroughAChild: a parent's retry or reset starts its child
// again; the child's workflow-scope keys come from the parent's identity (the epoch the parent
// writes on the child's start), so the child's charge replays instead of charging again. Keyed
// by the child's own first run, it got a new epoch and charged twice.
func TestParentRunAgainDoesNotChargeTwiceThroughAChild(t *testing.T) {
	t.Parallel()
	c := devserver.ForTest(t, "../bin/temporal", client.Options{})
	log := &keyLog{runs: map[string][]string{}}
	w := worker.New(c, "parents", worker.Options{Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()}})
	w.RegisterWorkflowWithOptions(parentWorkflow, workflow.RegisterOptions{Name: "parent"})
	w.RegisterWorkflowWithOptions(chargingChild, workflow.RegisterOptions{Name: "charging-child"})
	w.RegisterActivityWithOptions(log.activity, activity.RegisterOptions{Name: keyActivity})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	// A workflow whose tasks fail on replay stays open: bound the wait, so that it fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "retried", TaskQueue: "parents",
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 3}}, "parent", "retry")
		require.NoError(t, err)
		var got string
		require.NoError(t, r.Get(ctx, &got))
		require.Equal(t, []string{got, got}, log.of("retried/ship"), "the retried parent's child charged under another key")
	})

	t.Run("Reset", func(t *testing.T) {
		t.Parallel()
		r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "reset", TaskQueue: "parents"}, "parent", "reset")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(log.of("reset/ship")) == 1 }, 30*time.Second, 50*time.Millisecond)
		// Let the parent see its child complete, so that the reset starts the child again.
		require.Eventually(t, func() bool {
			d, err := c.DescribeWorkflow(ctx, "reset", r.GetRunID())
			return err == nil && len(d.RawResponse.GetPendingChildren()) == 0
		}, 30*time.Second, 50*time.Millisecond)
		resetRun, err := devserver.ResetToStart(ctx, c, "reset", r.GetRunID(), "test: start the child again")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(log.of("reset/ship")) == 2 }, 30*time.Second, 50*time.Millisecond)
		require.NoError(t, c.SignalWorkflow(ctx, "reset", resetRun, "finish", nil))
		var got string
		require.NoError(t, c.GetWorkflow(ctx, "reset", resetRun).Get(ctx, &got))
		require.Equal(t, []string{got, got}, log.of("reset/ship"), "the reset parent's child charged under another key")
	})
}
