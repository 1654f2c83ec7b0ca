package main

import (
	"context"
	"fmt"
	"time"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	tworker "github.com/tempotent/tempotent/worker"
)

// temporalRun is a Temporal dev server with two workers running the same workflow: one with
// tempotent's interceptor applying a receipt to every activity, one bare.
type temporalRun struct {
	env *tworker.Env
}

const (
	wrappedQueue = "bench-wrapped"
	bareQueue    = "bench-bare"
)

func startTemporal(ctx context.Context, url, cli string, d *downstream) *temporalRun {
	env, err := tworker.Start(ctx, tworker.Config{
		DatabaseURL: url,
		Receipts:    activity.Config{Schema: schema + "_e2e"},
		Migrate:     true,
		TaskQueue:   wrappedQueue,
		TemporalCLI: cli,
		LogLevel:    "error",
	})
	if err != nil {
		fatalf("start Temporal: %v", err)
	}
	steps := func(ctx workflow.Context, n int) (int, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
		for range n {
			if err := workflow.ExecuteActivity(ctx, "Charge", struct{}{}).Get(ctx, nil); err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	// The activity's idempotency key: the receipt's token when tempotent wraps it, else the
	// activity's own identity, which is what a bare activity would send.
	chargeActivity := func(ctx context.Context, _ struct{}) (charge, error) {
		key := ""
		if token, ok := keys.TokenFrom(ctx); ok {
			key = string(token)
		} else {
			info := sdkactivity.GetInfo(ctx)
			key = info.WorkflowExecution.ID + "/" + info.ActivityID
		}
		return d.charge(ctx, key, 0)
	}
	wrapped := env.NewWorker()
	if err := activity.Register(wrapped, env.Store, "Charge", chargeActivity, activity.Options{DownstreamDeduplicates: true}); err != nil {
		fatalf("register: %v", err)
	}
	bare := worker.New(env.Client, bareQueue, worker.Options{})
	bare.RegisterActivityWithOptions(chargeActivity, sdkactivity.RegisterOptions{Name: "Charge"})
	for _, w := range []worker.Worker{wrapped, bare} {
		w.RegisterWorkflowWithOptions(steps, workflow.RegisterOptions{Name: "Steps"})
		if err := w.Start(); err != nil {
			fatalf("start worker: %v", err)
		}
	}
	return &temporalRun{env: env}
}

// workflow runs the n-activity workflow on queue to its end.
func (t *temporalRun) workflow(queue string, n int) op {
	return func(ctx context.Context) error {
		run, err := t.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: next("wf-"), TaskQueue: queue}, "Steps", n)
		if err != nil {
			return err
		}
		var done int
		if err := run.Get(ctx, &done); err != nil {
			return err
		}
		if done != n {
			return fmt.Errorf("workflow ran %d activities, not %d", done, n)
		}
		return nil
	}
}

func (t *temporalRun) close() {
	_, _ = t.env.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+"_e2e CASCADE")
	t.env.Close()
}
