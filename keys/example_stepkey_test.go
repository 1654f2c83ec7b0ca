package keys_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
)

// checkout decides the charge's key before charging (a saga would register the refund under it),
// then ships, shadowing ctx as workflow code usually does.
func checkout(ctx workflow.Context) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	ctx, k, err := keys.StepKey(ctx, "charge")
	if err != nil {
		return nil, err
	}
	out := []string{"decided " + k.Operation}
	for _, step := range []workflow.Context{
		ctx,                        // the charge: the key StepKey decided
		keys.WithStep(ctx, "ship"), // a step named on it: its own key
		ctx,                        // the same context again: refused, never the charge's key
	} {
		var got keys.Key
		err := workflow.ExecuteActivity(step, "Record").Get(ctx, &got)
		switch {
		case err != nil && strings.Contains(err.Error(), keys.ErrPinnedContext.Error()):
			out = append(out, "refused: "+keys.ErrPinnedContext.Error())
		case err != nil:
			return nil, err
		default: // "wf:order-123/<epoch>/charge#1": the step and its occurrence come last
			out = append(out, "ran "+got.Operation+" as "+got.ID[strings.LastIndexByte(got.ID, '/')+1:])
		}
	}
	return out, nil
}

// StepKey's context keys exactly one activity: a later step named on it gets its own key, and
// a second activity scheduled with it as it is fails to schedule.
func ExampleStepKey() {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()}})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "order-123"})
	env.RegisterWorkflow(checkout)
	env.RegisterActivityWithOptions(func(ctx context.Context) (keys.Key, error) { return keys.FromActivity(ctx) },
		activity.RegisterOptions{Name: "Record"})
	env.ExecuteWorkflow(checkout)
	var out []string
	if err := env.GetWorkflowResult(&out); err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// decided charge
	// ran charge as charge#1
	// ran ship as ship#1
	// refused: a context from keys.StepKey or keys.WithCompensation keys exactly one activity
}
