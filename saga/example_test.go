package saga_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/saga"
)

// Order is the sample saga's input.
type Order struct {
	ID     string
	Amount int
}

// Payment charges, reserves and ships; the shipment fails, so the saga compensates.
func Payment(ctx workflow.Context, o Order) (saga.State, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	s, err := saga.New(ctx, nil)
	if err != nil {
		return saga.State{}, err
	}
	for _, step := range []struct{ name, do, undo string }{
		{"charge", "Charge", "Refund"},
		{"reserve", "Reserve", "Release"},
		{"ship", "Ship", "CancelShipment"},
	} {
		if err := s.Step(ctx, step.name, saga.Compensation{Activity: step.undo, Args: []any{o}}, step.do, o).Get(ctx, nil); err != nil {
			err = s.Compensate(ctx)
			return s.State(), err
		}
	}
	s.Complete()
	return s.State(), nil
}

func Example() {
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_saga CASCADE")
	defer pool.Exec(ctx, "DROP SCHEMA example_saga CASCADE") //nolint:errcheck
	store, _ := activity.NewStore(pool, &activity.Config{Schema: "example_saga"})
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}

	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	// Each activity prints its effect. Forward steps would send keys.TokenFrom(ctx) to the
	// provider; compensations find the forward effect by keys.CompensatesFrom(ctx).
	effect := func(what string) func(context.Context, Order) (string, error) {
		return func(ctx context.Context, o Order) (string, error) {
			if what == "ship" {
				return "", temporal.NewNonRetryableApplicationError("no carrier for this address", "Declined", nil)
			}
			fmt.Println(what, o.ID)
			return what, nil
		}
	}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	for name, what := range map[string]string{"Charge": "charge", "Reserve": "reserve", "Ship": "ship",
		"Refund": "refund", "Release": "release", "CancelShipment": "cancel shipment"} {
		if err := activity.Register(env, store, name, effect(what), activity.Options{DownstreamDeduplicates: true}); err != nil {
			panic(err)
		}
	}
	env.ExecuteWorkflow(Payment, Order{ID: "order-1", Amount: 4200})

	var st saga.State
	if err := errors.Join(env.GetWorkflowError(), env.GetWorkflowResult(&st)); err != nil {
		panic(err)
	}
	fmt.Println(st.Status)
	for _, s := range st.Steps {
		fmt.Printf("%s: %s, %s %s\n", s.Name, s.Outcome, s.Compensation, s.CompensationState)
	}
	// Output:
	// charge order-1
	// reserve order-1
	// cancel shipment order-1
	// release order-1
	// refund order-1
	// compensated
	// charge: completed, Refund completed
	// reserve: completed, Release completed
	// ship: failed, CancelShipment completed
}
