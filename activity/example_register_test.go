package activity_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// Register names and types an activity once; workflow code decides its key. Here two checkout
// workflows charge the same order, named by its business key: the provider is called once, and
// both get the same charge.
func ExampleRegister() {
	ctx := context.Background()
	store, _, cleanup := exampleStore(ctx, "example_register")
	defer cleanup()

	calls := 0
	charge := func(ctx context.Context, cents int) (string, error) {
		calls++
		token, _ := keys.TokenFrom(ctx) // send it as the provider's Idempotency-Key
		return fmt.Sprintf("ch_%s (%d cents)", token.String()[:6], cents), nil
	}
	checkout := func(ctx workflow.Context, order string) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		ctx = keys.WithID(keys.WithStep(ctx, "charge"), order)
		var ch string
		err := workflow.ExecuteActivity(ctx, "Charge", 4200).Get(ctx, &ch)
		return ch, err
	}

	for _, workflowID := range []string{"checkout-1", "checkout-2"} {
		var suite testsuite.WorkflowTestSuite
		suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
		env := suite.NewTestWorkflowEnvironment()
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflowID})
		if err := activity.Register(env, store, "Charge", charge, activity.Options{DownstreamDeduplicates: true}); err != nil {
			fmt.Println(err)
			return
		}
		env.RegisterWorkflowWithOptions(checkout, workflow.RegisterOptions{Name: "Checkout"})
		env.ExecuteWorkflow("Checkout", "order-123")
		var ch string
		if err := env.GetWorkflowResult(&ch); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(workflowID, ch)
	}
	fmt.Println("provider calls:", calls)
	// Output:
	// checkout-1 ch_elpnBZ (4200 cents)
	// checkout-2 ch_elpnBZ (4200 cents)
	// provider calls: 1
}
