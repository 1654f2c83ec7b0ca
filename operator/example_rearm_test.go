package operator_test

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// A refund failed for good while the merchant account was blocked, and every later attempt
// replays that failure. Once the account is unblocked, an operator re-arms the receipt: the next
// attempt calls the provider again under the same token and records what it does. (The tempotent
// command's receipts rearm does the same; for a saga, the workflow then calls Compensate again.)
func ExampleClient_Rearm() {
	ctx := context.Background()
	store, op, cleanup := exampleSetup(ctx, "example_rearm")
	defer cleanup()

	fp, _ := keys.FingerprintOf(map[string]string{"charge": "ch_1"})
	refund := activity.Call{Key: mustKey(keys.Explicit("default", "", "Refund", "order-7")), Fingerprint: fp,
		DownstreamDeduplicates: true}
	blocked := true
	provider := func(ctx context.Context) (string, error) {
		if blocked {
			return "", temporal.NewNonRetryableApplicationError("account blocked", "Rejected", nil)
		}
		return "re_1", nil
	}
	_, err := activity.Do(ctx, store, refund, provider)
	fmt.Println(err)
	blocked = false
	_, err = activity.Do(ctx, store, refund, provider)
	fmt.Println(err) // replayed

	r, err := op.Rearm(ctx, refund.Key.Token(), operator.Rearming{By: "oncall", Reason: "INC-9: account unblocked"})
	fmt.Println(r.Status, err)
	got, err := activity.Do(ctx, store, refund, provider)
	fmt.Println(got, err)

	audit, _ := op.Audit(ctx, refund.Key.Token())
	fmt.Println(audit[0].Action, audit[0].Actor, audit[0].Reason)
	// Output:
	// account blocked (type: Rejected, retryable: false)
	// account blocked (type: Rejected, retryable: false)
	// lease ended <nil>
	// re_1 <nil>
	// rearm oncall INC-9: account unblocked
}
