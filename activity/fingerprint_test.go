package activity_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

type Transfer2 struct {
	Seller string
	Amount int
	Note   string `tempotent:"-"`
	Tags   []string
}

// Struct tags through the activity's own path: a left-out field's change replays, a counted
// field's change is a mismatch that calls nothing.
func TestFingerprintTagsDecideWhatReplays(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	ctx := context.Background()
	calls := 0
	pay := func(context.Context) (int, error) { calls++; return calls, nil }
	do := func(req Transfer2) (int, error) {
		return activity.Do(ctx, s, activity.Call{Key: keys.Key{Namespace: "default", Operation: "Pay", ID: "t-1"}, Request: req,
			DownstreamDeduplicates: true}, pay)
	}
	first, err := do(Transfer2{Seller: "s1", Amount: 10, Note: "first wording"})
	require.NoError(t, err)
	again, err := do(Transfer2{Seller: "s1", Amount: 10, Note: "second wording", Tags: []string{}})
	require.NoError(t, err, "a left-out field, or an empty slice for a nil one, made a retry a mismatch")
	require.Equal(t, first, again)
	_, err = do(Transfer2{Seller: "s1", Amount: 11})
	require.ErrorAs(t, err, new(*activity.MismatchError))
	require.Equal(t, 1, calls)
}

// A receipt recorded under fingerprint version 1 (before tags and nil ≡ empty) keeps matching the
// retries of its intent: with the request at hand, it is compared under version 1.
func TestReceiptsOfVersion1KeepMatching(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	ctx := context.Background()
	req := Transfer2{Seller: "s1", Amount: 10, Note: "n"} // nil Tags: version 2 differs from version 1
	v1, err := keys.FingerprintAt(req, 1)
	require.NoError(t, err)
	v2, err := keys.FingerprintOf(req)
	require.NoError(t, err)
	require.Equal(t, int16(2), v2.Version, "the request must differ between the versions for this test")

	calls := 0
	pay := func(context.Context) (int, error) { calls++; return 7, nil }
	k := keys.Key{Namespace: "default", Operation: "Pay", ID: "old-1"}
	_, err = activity.Do(ctx, s, activity.Call{Key: k, Fingerprint: v1, DownstreamDeduplicates: true}, pay) // an older worker
	require.NoError(t, err)

	got, err := activity.Do(ctx, s, activity.Call{Key: k, Request: req, DownstreamDeduplicates: true}, pay)
	require.NoError(t, err, "a version-1 receipt did not match its own request")
	require.Equal(t, 7, got)
	_, err = activity.Do(ctx, s, activity.Call{Key: k, Fingerprint: v2, DownstreamDeduplicates: true}, pay)
	require.ErrorAs(t, err, new(*activity.MismatchError), "without the request, versions 1 and 2 of different text cannot match")
	changed := req
	changed.Amount = 11
	_, err = activity.Do(ctx, s, activity.Call{Key: k, Request: changed, DownstreamDeduplicates: true}, pay)
	require.ErrorAs(t, err, new(*activity.MismatchError))
	require.Equal(t, 1, calls)
}
