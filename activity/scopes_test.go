package activity_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/keys"
)

// The scopes on a real server: what each kind of run does to a workflow-scope key, and the update
// scope across Continue-As-New. The dev server is the one make test installs into bin/.

// effects counts the calls of the registered activity per token: each call is an effect.
type effects struct {
	mu     sync.Mutex
	tokens map[string][]string // workflow ID → the token of each call, in order
	notes  map[string][]string // workflow ID → what the workflow noted (a refused step)
}

func (e *effects) charge(ctx context.Context, _ struct{}) (string, error) {
	tok, _ := keys.TokenFrom(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	id := sdkactivity.GetInfo(ctx).WorkflowExecution.ID
	e.tokens[id] = append(e.tokens[id], string(tok))
	return string(tok), nil
}

func (e *effects) note(ctx context.Context, s string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := sdkactivity.GetInfo(ctx).WorkflowExecution.ID
	e.notes[id] = append(e.notes[id], s)
	return nil
}

func (e *effects) of(id string) (tokens, notes []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.tokens[id]...), append([]string(nil), e.notes[id]...)
}

// scopeWorkflow charges once, then does what mode says: fail its first attempt (a workflow
// retry), continue as new once, fail a cron run's first attempt, or wait for a signal (a reset).
// A charge that cannot be scheduled is noted, and ends the run.
func scopeWorkflow(ctx workflow.Context, mode string, generation int) (string, error) {
	info := workflow.GetInfo(ctx)
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 3},
	})
	var token string
	if err := workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), "Charge", struct{}{}).Get(ctx, &token); err != nil {
		_ = workflow.ExecuteActivity(ctx, "Note", err.Error()).Get(ctx, nil)
		return "", err
	}
	switch {
	case mode == "retry" && info.Attempt < 3, mode == "cron-retry" && info.Attempt == 1:
		return "", errors.New("this run fails after charging, so that Temporal retries the workflow")
	case mode == "continue" && generation == 0:
		return "", workflow.NewContinueAsNewError(ctx, scopeWorkflow, mode, generation+1)
	case mode == "reset":
		workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	}
	return token, nil
}

// localWorkflow charges in a local activity whose first attempt fails, with a retry backoff
// longer than the workflow task timeout: the SDK retries it by timer, under a new activity ID.
func localWorkflow(ctx workflow.Context) (string, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 1, MaximumAttempts: 2},
	})
	var token string
	err := workflow.ExecuteLocalActivity(keys.WithStep(ctx, "charge"), "LocalCharge", struct{}{}).Get(ctx, &token)
	return token, err
}

// updateWorkflow charges from its "pay" update handler, keyed by the update's ID. After its first
// update it continues as new, so that the update can be delivered again to the next run.
func updateWorkflow(ctx workflow.Context, generation int) error {
	paid := 0
	if err := workflow.SetUpdateHandler(ctx, "pay", func(ctx workflow.Context) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
		var token string
		err := workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), "Charge", struct{}{}).Get(ctx, &token)
		paid++
		return token, err
	}); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return paid > 0 && workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	if generation == 0 {
		return workflow.NewContinueAsNewError(ctx, updateWorkflow, generation+1)
	}
	return workflow.Await(ctx, func() bool { return false })
}

func TestScopesOnTheDevServer(t *testing.T) {
	t.Parallel()
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	ctx := context.Background()
	c := devserver.ForTest(t, cli, client.Options{Logger: discardLogger()})

	s, _ := setup(t, nil)
	e := &effects{tokens: map[string][]string{}, notes: map[string][]string{}}
	const queue = "scopes"
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	w.RegisterWorkflow(scopeWorkflow)
	w.RegisterWorkflow(updateWorkflow)
	w.RegisterWorkflow(localWorkflow)
	var (
		localMu  sync.Mutex
		localIDs []string // the activity ID and token of each LocalCharge attempt
	)
	require.NoError(t, activity.Register(w, s, "LocalCharge", func(ctx context.Context, in struct{}) (string, error) {
		localMu.Lock()
		tok, _ := keys.TokenFrom(ctx)
		localIDs = append(localIDs, sdkactivity.GetInfo(ctx).ActivityID+" "+string(tok))
		first := len(localIDs) == 1
		localMu.Unlock()
		if first {
			return "", errors.New("the provider answered 502")
		}
		return e.charge(ctx, in)
	}, activity.Options{DownstreamDeduplicates: true}))
	w.RegisterActivityWithOptions(e.note, sdkactivity.RegisterOptions{Name: "Note"})
	require.NoError(t, activity.Register(w, s, "Charge", e.charge, activity.Options{DownstreamDeduplicates: true}))
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	retry := &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 5}
	start := func(t *testing.T, opts client.StartWorkflowOptions, args ...any) client.WorkflowRun {
		t.Helper()
		opts.TaskQueue = queue
		run, err := c.ExecuteWorkflow(ctx, opts, scopeWorkflow, args...)
		require.NoError(t, err)
		return run
	}

	t.Run("WorkflowRetryReplaysTheFirstRunsCharge", func(t *testing.T) {
		t.Parallel()
		var token string
		require.NoError(t, start(t, client.StartWorkflowOptions{ID: "retry", RetryPolicy: retry}, "retry", 0).Get(ctx, &token))
		tokens, notes := e.of("retry")
		require.Empty(t, notes)
		require.Equal(t, []string{token}, tokens, "a retried workflow charged again")
	})

	t.Run("ContinueAsNewChargesAgain", func(t *testing.T) {
		t.Parallel()
		var token string
		require.NoError(t, start(t, client.StartWorkflowOptions{ID: "continue"}, "continue", 0).Get(ctx, &token))
		tokens, _ := e.of("continue")
		require.Len(t, tokens, 2, "each run after Continue-As-New is a new intent")
		require.NotEqual(t, tokens[0], tokens[1])
		require.Equal(t, tokens[1], token)
	})

	t.Run("ResetReplays", func(t *testing.T) {
		t.Parallel()
		run := start(t, client.StartWorkflowOptions{ID: "reset"}, "reset", 0)
		require.Eventually(t, func() bool { tokens, _ := e.of("reset"); return len(tokens) == 1 }, 30*time.Second, 50*time.Millisecond)
		resetRun, err := devserver.ResetToStart(ctx, c, "reset", run.GetRunID(), "test: replay the charge")
		require.NoError(t, err)
		var token string
		require.Eventually(t, func() bool {
			d, err := c.DescribeWorkflow(ctx, "reset", resetRun)
			return err == nil && d.RawResponse.PendingActivities == nil && d.RawResponse.WorkflowExecutionInfo.GetHistoryLength() > 6
		}, 30*time.Second, 100*time.Millisecond)
		require.NoError(t, c.SignalWorkflow(ctx, "reset", resetRun, "finish", nil))
		require.NoError(t, c.GetWorkflow(ctx, "reset", resetRun).Get(ctx, &token))
		tokens, _ := e.of("reset")
		require.Equal(t, []string{token}, tokens, "the reset run charged again")
	})

	t.Run("CronRunsChargeAgainAndACronRetryIsRefused", func(t *testing.T) {
		t.Parallel()
		start(t, client.StartWorkflowOptions{ID: "cron", CronSchedule: "@every 2s", RetryPolicy: retry}, "cron-retry", 0)
		// Each cron run charges on its first attempt and fails; its retries are refused a key, until
		// they run out and the next cron run charges.
		require.Eventually(t, func() bool { tokens, notes := e.of("cron"); return len(tokens) >= 2 && len(notes) >= 1 }, 60*time.Second, 100*time.Millisecond)
		require.NoError(t, c.TerminateWorkflow(ctx, "cron", "", "test done"))
		tokens, notes := e.of("cron")
		require.GreaterOrEqual(t, len(tokens), 2)
		require.Len(t, uniq(tokens), len(tokens), "two cron runs shared a key")
		for _, n := range notes {
			require.Contains(t, n, "retries a cron run")
			require.Contains(t, n, activity.ErrTypeInvalidKey, "a plain activity (Note) still runs in the refused run")
		}
	})

	t.Run("LocalActivityRetriedByTimerKeepsItsKey", func(t *testing.T) {
		t.Parallel()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "local", TaskQueue: queue, WorkflowTaskTimeout: time.Second}, localWorkflow)
		require.NoError(t, err)
		var token string
		require.NoError(t, run.Get(ctx, &token))
		localMu.Lock()
		ids := append([]string(nil), localIDs...)
		localMu.Unlock()
		require.Len(t, ids, 2)
		id0, tok0, _ := strings.Cut(ids[0], " ")
		id1, tok1, _ := strings.Cut(ids[1], " ")
		require.NotEqual(t, id0, id1, "the SDK did not retry the local activity by timer")
		require.Equal(t, tok0, tok1, "the timer retry got another key")
		require.Equal(t, token, tok1)
		tokens, _ := e.of("local")
		require.Equal(t, []string{token}, tokens)
	})

	t.Run("UpdateAfterContinueAsNewReplays", func(t *testing.T) {
		t.Parallel()
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "update", TaskQueue: queue}, updateWorkflow, 0)
		require.NoError(t, err)
		pay := func() string {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: "update", UpdateName: "pay", UpdateID: "pay-1",
				WaitForStage: client.WorkflowUpdateStageCompleted})
			require.NoError(t, err)
			var token string
			require.NoError(t, h.Get(ctx, &token))
			return token
		}
		first := pay()
		// Wait for the next run, then deliver the same update again: Temporal deduplicates update
		// IDs within a run only.
		require.Eventually(t, func() bool {
			d, err := c.DescribeWorkflow(ctx, "update", "")
			if err != nil {
				return false
			}
			info := d.RawResponse.GetWorkflowExecutionInfo()
			return info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING &&
				info.GetExecution().GetRunId() != info.GetFirstRunId()
		}, 30*time.Second, 100*time.Millisecond)
		again := pay()
		require.Equal(t, first, again)
		tokens, _ := e.of("update")
		require.Equal(t, []string{first}, tokens, "the update's charge ran again after Continue-As-New")
		require.NoError(t, c.TerminateWorkflow(ctx, "update", "", "test done"))
	})
}

func uniq(ss []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}

func discardLogger() tlog.Logger { return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)) }
