package activity_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// A payout batch: one activity pays every seller, each under its own receipt. The first
// attempt dies after three sellers (here: the gateway fails for the rest); the retry replays
// those three without asking the gateway and pays the other two. Nobody is paid twice.
func ExampleForEach() {
	ctx := context.Background()
	store, _, cleanup := exampleStore(ctx, "example_foreach")
	defer cleanup()

	type Seller struct {
		ID     string
		Amount int
	}
	sellers := []Seller{{"s1", 10}, {"s2", 20}, {"s3", 30}, {"s4", 40}, {"s5", 50}}
	paid := map[keys.Token]int{} // the gateway's transfers, by idempotency key
	down := false
	transfer := func(ctx context.Context, s Seller) (string, error) {
		if down && s.ID > "s3" {
			return "", errors.New("gateway unavailable") // retryable: left to the next attempt
		}
		tok, _ := keys.TokenFrom(ctx) // the seller's own token: send it as the Idempotency-Key
		paid[tok]++
		return "tr_" + s.ID, nil
	}
	payOut := func(ctx context.Context, sellers []Seller) (int, error) {
		results, err := activity.ForEach(ctx, store, sellers, activity.Items[Seller]{
			ID: func(s Seller) string { return s.ID },
			// The pass's name, in each seller's key: a second pass over the sellers (a
			// notice to each) needs a name of its own.
			Operation: "Transfer",
			Options:   activity.Options{DownstreamDeduplicates: true},
		}, transfer)
		if err != nil {
			return 0, err // a *activity.BatchUnfinishedError: Temporal retries the batch
		}
		replayed := 0
		for _, r := range results {
			if r.Replayed {
				replayed++
			}
		}
		return replayed, nil
	}

	attempt := func() {
		var suite testsuite.WorkflowTestSuite
		suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler))) // keep Output clean
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{
			Interceptors:              []interceptor.WorkerInterceptor{activity.NewInterceptor()},
			BackgroundActivityContext: keys.Given(ctx, "payout", "payout-2026-12"),
		})
		env.RegisterActivityWithOptions(payOut, sdkactivity.RegisterOptions{Name: "PayOut"})
		val, err := env.ExecuteActivity("PayOut", sellers)
		if err != nil {
			var appErr *temporal.ApplicationError // errors crossing into Temporal keep their type
			fmt.Println("attempt failed:", errors.As(err, &appErr) && appErr.Type() == activity.ErrTypeBatchUnfinished)
			return
		}
		var replayed int
		_ = val.Get(&replayed)
		fmt.Println("attempt done, replayed:", replayed)
	}
	down = true
	attempt()
	down = false
	attempt()
	most := 0
	for _, n := range paid {
		most = max(most, n)
	}
	fmt.Println("transfers:", len(paid), "most to one seller:", most)
	// Output:
	// attempt failed: true
	// attempt done, replayed: 3
	// transfers: 5 most to one seller: 1
}
