package keys_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// The key model on a real server, for what the test environment cannot do: a program runs, then
// runs again in the next run of its workflow — a workflow retry, a Continue-As-New or a reset —
// and both runs' keys must be the model's, each run with the epoch and run ID that the
// documented rules give it:
//
//	                  epoch of the second run             run ID
//	workflow retry    the first run's (its FirstRunID)   new
//	reset             the first run's                    new
//	Continue-As-New   "can:" and the first run's ID      new
//
// So a retried or reset run replays every key but its run-scope ones, a continued run repeats
// only its explicit ones, and a child started again gets the keys its parent's identity gives it.
// Update handlers are left to the test environment's programs and TestScopesOnTheDevServer.

// serverRun is what one run of serverModelWorkflow reported: its run ID and its records.
type serverRun struct {
	RunID   string
	Records []string
}

type serverReports struct {
	mu   sync.Mutex
	runs map[string][]serverRun // workflow ID → its runs, in order
}

func (r *serverReports) report(ctx context.Context, records []string) error {
	info := activity.GetInfo(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[info.WorkflowExecution.ID] = append(r.runs[info.WorkflowExecution.ID], serverRun{RunID: info.WorkflowExecution.RunID, Records: records})
	return nil
}

func (r *serverReports) of(workflowID string) []serverRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]serverRun(nil), r.runs[workflowID]...)
}

// serverModelWorkflow runs p's main program and reports its records, then runs again as mode
// says: "retry" fails the first attempt, "continue" continues as new once, "reset" waits for the
// signal "finish" (the test resets it meanwhile).
func serverModelWorkflow(ctx workflow.Context, p Program, mode string, generation int) error {
	ctx = withOptions(ctx)
	var out []string
	if err := runOps(ctx, p.Main, &out); err != nil {
		return err
	}
	if err := workflow.ExecuteActivity(keys.WithStep(ctx, "report"), "Report", out).Get(ctx, nil); err != nil {
		return err
	}
	switch {
	case mode == "retry" && workflow.GetInfo(ctx).Attempt == 1:
		return errors.New("the first attempt fails, so that Temporal retries the workflow")
	case mode == "continue" && generation == 0:
		return workflow.NewContinueAsNewError(ctx, "server-model", p, mode, generation+1)
	case mode == "reset":
		workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	}
	return nil
}

// TestKeyModelOnTheDevServer runs TEMPOTENT_EXPLORE_KEYS_N/100 programs (at least 2) from
// TEMPOTENT_EXPLORE_SEED, each in three workflows — retried, continued as new, reset — on the dev
// server, and checks both runs of each against the model.
func TestKeyModelOnTheDevServer(t *testing.T) {
	t.Parallel()
	n := max(2, envInt("TEMPOTENT_EXPLORE_KEYS_N", 0)/100)
	seed := uint64(envInt("TEMPOTENT_EXPLORE_SEED", 1))
	c := devserver.ForTest(t, "../bin/temporal", client.Options{})
	reports := &serverReports{runs: map[string][]serverRun{}}
	const queue = "key-model"
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()}})
	w.RegisterWorkflowWithOptions(serverModelWorkflow, workflow.RegisterOptions{Name: "server-model"})
	w.RegisterWorkflowWithOptions(keyedChild, workflow.RegisterOptions{Name: "keyed-child"})
	for _, typ := range modelTypes {
		w.RegisterActivityWithOptions(activityKey, activity.RegisterOptions{Name: typ})
	}
	w.RegisterActivityWithOptions(reports.report, activity.RegisterOptions{Name: "Report"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	for i := range uint64(n) {
		s := seed + i
		p := genProgram(rand.New(rand.NewPCG(s, 0x6b657973)))
		p.Updates = nil
		for _, mode := range []string{"retry", "continue", "reset"} {
			t.Run(fmt.Sprintf("Seed%d/%s", s, mode), func(t *testing.T) {
				t.Parallel()
				// A workflow whose tasks fail on replay stays open: bound the wait, so that it
				// fails the test. Each program has its own bound, however many run at once.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				id := fmt.Sprintf("order-%d-%s", s, mode)
				opts := client.StartWorkflowOptions{ID: id, TaskQueue: queue}
				if mode == "retry" {
					opts.RetryPolicy = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 2}
				}
				r, err := c.ExecuteWorkflow(ctx, opts, "server-model", p, mode, 0)
				require.NoError(t, err)
				if mode == "reset" {
					require.Eventually(t, func() bool { return len(reports.of(id)) == 1 }, time.Minute, 50*time.Millisecond)
					resetRun, err := devserver.ResetToStart(ctx, c, id, r.GetRunID(), "test: run the program again")
					require.NoError(t, err)
					require.Eventually(t, func() bool { return len(reports.of(id)) == 2 }, time.Minute, 50*time.Millisecond)
					require.NoError(t, c.SignalWorkflow(ctx, id, resetRun, "finish", nil))
					r = c.GetWorkflow(ctx, id, resetRun)
				}
				require.NoError(t, r.Get(ctx, nil))
				runs := reports.of(id)
				require.Len(t, runs, 2)
				first := runs[0].RunID
				var got []string
				var want []expected
				for i, run := range runs {
					m := &model{namespace: "default", workflowID: id, runID: run.RunID, epoch: first, counts: map[string]int{}}
					if i == 1 && mode == "continue" {
						m.epoch = "can:" + first
					}
					m.run(p.Main, "")
					got, want = append(got, run.Records...), append(want, m.out...)
				}
				if msg := compareModel(got, want); msg != "" {
					t.Fatalf("key model on the dev server: program with seed %d, mode %s (first run %s, second %s) failed: %s\n%s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_KEYS_N=100 go test -v -run TestKeyModelOnTheDevServer ./keys/",
						s, mode, first, runs[1].RunID, msg, p, s)
				}
			})
		}
	}
}
