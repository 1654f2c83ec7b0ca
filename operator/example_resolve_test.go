package operator_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// An attempt at a downstream that does not deduplicate charged and froze; the next found its
// lease ended and refused to guess (OutcomeUnknown). An operator finds the receipt, checks the
// provider under its token, and records what happened: the next attempt replays it without
// calling. (The tempotent command's receipts list and receipts resolve do the same.)
func ExampleClient_Resolve() {
	ctx := context.Background()
	store, op, cleanup := exampleSetup(ctx, "example_resolve")
	defer cleanup()

	fp, _ := keys.FingerprintOf(map[string]int{"amount": 100})
	charge := activity.Call{Key: mustKey(keys.Explicit("default", "", "LegacyCharge", "order-7")), Fingerprint: fp,
		Lease: 50 * time.Millisecond}
	var calls atomic.Int32
	frozen, thaw := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(frozen)
		_, _ = activity.Do(ctx, store, charge, func(context.Context) (string, error) {
			calls.Add(1)
			<-thaw // charged, then froze past its lease
			return "ch_1", nil
		})
	}()
	time.Sleep(100 * time.Millisecond)
	_, err := activity.Do(ctx, store, charge, func(context.Context) (string, error) { calls.Add(1); return "ch_2", nil })
	fmt.Println(errors.As(err, new(*activity.OutcomeUnknownError)))

	page, _ := op.Receipts(ctx, operator.Filter{State: operator.FilterUnresolved})
	r := page.Receipts[0]
	fmt.Println(r.Key.Operation, r.Status)
	r, _ = op.Resolve(ctx, r.Token, operator.Resolution{Applied: true, Result: "ch_1",
		By: "oncall", Reason: "the gateway's report shows ch_1 under the token"})
	fmt.Println(r.Status, r.ResultText())

	got, err := activity.Do(ctx, store, charge, func(context.Context) (string, error) { calls.Add(1); return "ch_3", nil })
	fmt.Println(got, err, calls.Load())
	close(thaw)
	<-frozen
	// Output:
	// true
	// LegacyCharge unknown
	// succeeded "ch_1"
	// ch_1 <nil> 1
}
