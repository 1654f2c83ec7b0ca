package activitytest_test

import (
	"context"
	"fmt"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/keys"
)

// A payout that pays each seller under the seller's own token (activity.ForEach): the check
// counts per seller, and fails naming any seller paid twice, or never.
func ExampleRequireRetrySafe_batch() {
	t := &exampleTB{} // in a test: func TestPayoutIsRetrySafe(t *testing.T) {
	defer t.done()
	provider := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	store := activitytest.NewStore(t, nil)
	payOut := func(ctx context.Context, sellers []string) (int, error) {
		results, err := activity.ForEach(ctx, store, sellers, activity.Items[string]{
			ID: func(s string) string { return s }, Operation: "Transfer",
			Options: activity.Options{DownstreamDeduplicates: true},
		}, func(ctx context.Context, seller string) (charge, error) {
			tok, _ := keys.TokenFrom(ctx) // the seller's own token
			return postBody(ctx, provider.URL+"/v1/transfers/"+seller, tok.String(), nil)
		})
		return len(results), err
	}
	activitytest.RequireRetrySafe(t, activitytest.Check[[]string, int]{
		Activity: payOut,
		Options:  activity.Options{Batch: true},
		Input:    []string{"s1", "s2", "s3"}, Other: []string{"s1", "s2"},
		// The batch's items, and each one's effects by its ID: no Effects.
		Items:       func(sellers []string) []string { return sellers },
		ItemEffects: func() map[string]int { return provider.EffectsPer("/v1/transfers/") },
		Faults:      provider, Store: store,
	})
	fmt.Println(t.Failed(), provider.EffectsPer("/v1/transfers/"))
	// Output: false map[s1:7 s2:7 s3:7]
}
