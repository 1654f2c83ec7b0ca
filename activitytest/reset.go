package activitytest

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/keys"
)

// PathReset is the path RequireResetSafe runs, as its failures name it.
const PathReset = "reset (the same workflow, a new run)"

// NewDevServer starts the Temporal dev server for tb and returns a client of it; both stop when
// tb ends. The CLI is the one at TEMPORAL_CLI when that is set (on Linux the server then dies
// with the test binary, even one killed by its -timeout), else the SDK downloads and caches one
// (testsuite.StartDevServer).
func NewDevServer(tb testing.TB) client.Client {
	tb.Helper()
	copts := client.Options{Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(testLog{tb}, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if cli := os.Getenv("TEMPORAL_CLI"); cli != "" {
		// Leashed to the test binary: a test killed by its -timeout takes the server with it.
		return devserver.ForTest(tb, cli, copts)
	}
	srv, err := testsuite.StartDevServer(context.Background(), testsuite.DevServerOptions{LogLevel: "error", ClientOptions: &copts})
	if err != nil {
		tb.Fatalf("activitytest: start the Temporal dev server: %v. Set TEMPORAL_CLI to a temporal CLI binary (go install github.com/temporalio/cli/cmd/temporal@v1.5.1), or let the SDK download one", err)
	}
	tb.Cleanup(func() { srv.Client().Close(); _ = srv.Stop() })
	return srv.Client()
}

// RequireResetSafe runs c's activity in a workflow on a real Temporal server (c is its client:
// NewDevServer, or one of your own) and has its worker die after the activity's effect, before
// the receipt is written; then an operator resets the workflow to before the activity, and the
// reset run's attempt takes the receipt over. It fails tb unless that attempt had no second
// effect (counted by check.Effects) and the reset run completed. A reset keeps the workflow's
// scope — the key, and the token — and changes the run ID: an activity that builds its
// downstream's idempotency key from the run or activity ID, instead of sending keys.TokenFrom,
// charges again here.
func RequireResetSafe[In, Out any](tb testing.TB, c client.Client, check Check[In, Out]) {
	tb.Helper()
	if asWorker != nil {
		return // a worker process (process.go) runs one attempt of a RequireRetrySafe
	}
	if check.Activity == nil {
		tb.Fatalf("activitytest: RequireResetSafe needs Check.Activity")
	}
	fx := newCounter(tb, "Check", check.Effects, check.Items, check.ItemEffects, check.Input)
	if check.Store == nil {
		check.Store = NewStore(tb, nil)
	}
	ctx := context.Background()
	r := &runner[In, Out]{tb: tb, c: check, fx: fx, ts: testStoreOf(tb, check.Store)}
	queue, id := "activitytest-"+r.newID("reset"), r.newID("reset")

	// The first attempt is held after its function returned — its worker died — until the check
	// ends; every later one runs through.
	held, release := make(chan keys.Token, 1), make(chan struct{})
	var batch keys.Key // the held attempt's key, whose items a batch has in flight
	defer close(release)
	var calls atomic.Int32
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in In) (Out, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 10}})
		var out Out
		err := workflow.ExecuteActivity(keys.WithStep(ctx, "step"), activityName, in).Get(ctx, &out)
		return out, err
	}, workflow.RegisterOptions{Name: "activitytest.ResetWorkflow"})
	err := activity.Register(w, check.Store, activityName, func(ctx context.Context, in In) (Out, error) {
		out, err := check.Activity(ctx, in)
		if calls.Add(1) == 1 {
			tok, _ := keys.TokenFrom(ctx)
			batch, _ = keys.FromActivity(ctx)
			held <- tok
			<-release
		}
		return out, err
	}, check.Options)
	if err != nil {
		tb.Fatalf("activitytest: %v", err)
	}
	if err := w.Start(); err != nil {
		tb.Fatalf("activitytest: start a worker: %v", err)
	}
	defer w.Stop()

	before := fx.now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "activitytest.ResetWorkflow", check.Input)
	if err != nil {
		tb.Fatalf("activitytest: %s: start the workflow: %v", PathReset, err)
	}
	var token keys.Token
	select {
	case token = <-held:
	case <-time.After(time.Minute):
		tb.Fatalf("activitytest: %s: the activity did not run within a minute", PathReset)
	}
	fx.firstEffects(tb, PathReset, fx.since(before))
	r.endLease(PathReset, token)
	if fx.items != nil {
		r.itemsInFlight(PathReset, batch)
	}
	resetRun, err := devserver.ResetToStart(ctx, c, id, run.GetRunID(), "activitytest: run the activity again, as an operator's reset does")
	if err != nil {
		tb.Fatalf("activitytest: %s: reset the workflow: %v", PathReset, err)
	}
	var out Out
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = c.GetWorkflow(getCtx, id, resetRun).Get(getCtx, &out)
	if t := fx.tally(fx.since(before)); t.n != 1 {
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1: the reset run's attempt, which took over the receipt under the same token, had the effect again. Send the token (keys.TokenFrom) as the downstream's idempotency key, not an ID of the run or the activity%s", PathReset, t.n, t.note)
	}
	if err != nil && !isType(err, activity.ErrTypeOutcomeUnknown) {
		tb.Errorf("activitytest: %s: the reset run failed: %v", PathReset, err)
	}
}
