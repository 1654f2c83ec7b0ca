package activity_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// A first run of a batch pays one round trip per item, its completion: its items are reserved
// ahead, a chunk per statement (chunks of 2, 4, 8 … at Concurrency 1), after the one statement
// that reads the receipts of them all.
func TestForEachFirstRunRoundTrips(t *testing.T) {
	t.Parallel()
	s, _, trips := countedStore(t)
	p := newPayouts()
	payees := payeesN(100)
	before := trips.RoundTrips()
	_, err := runPayOut(t, s, p, payees, 1)
	require.NoError(t, err)
	const read, chunks = 1, 6 // 2 + 4 + 8 + 16 + 32 + 38
	require.Equal(t, int64(read+chunks+len(payees)), trips.RoundTrips()-before, "round trips of a first run of 100 items")
	p.requireEachPaidOnce(t, payees)
}

// A retry of a batch whose items are all settled pays three round trips: one statement reads
// and takes over the batch's own receipt (a batch left unfinished released it), one reads every
// item's receipt, and one completes the batch's receipt with its result. It was four: the
// batch's receipt was read, then taken over.
func TestSettledBatchRetryRoundTrips(t *testing.T) {
	t.Parallel()
	s, _, trips := countedStore(t)
	p := newPayouts()
	payees := payeesN(20)
	call := activity.Call{Key: keys.Key{Namespace: "roundtrips", Operation: "PayOut", ID: "settled"}, Request: "settled",
		DownstreamDeduplicates: true, DownstreamKeyMemory: math.MaxInt64} // as Options{Batch: true} declares it
	again := errors.New("stopped after its items: run the batch again")
	run := func(attempt int32, err error) (int, error) {
		c := call
		c.Attempt = attempt
		return activity.Do(context.Background(), s, c, func(ctx context.Context) (int, error) {
			results, ferr := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer",
				Options: activity.Options{DownstreamDeduplicates: true}}, p.pay)
			if ferr != nil {
				return 0, ferr
			}
			return len(results), err
		})
	}
	_, err := run(1, again)
	require.ErrorIs(t, err, again)

	before := trips.RoundTrips()
	n, err := run(2, nil)
	require.NoError(t, err)
	require.Equal(t, len(payees), n)
	require.Equal(t, int64(3), trips.RoundTrips()-before, "round trips of a settled batch's retry")
	p.requireEachPaidOnce(t, payees)
	for _, payee := range payees {
		require.Equal(t, 1, p.requests[payee.ID], "a settled payee was asked again: %s", payee.ID)
	}

	before = trips.RoundTrips()
	n, err = run(3, nil)
	require.NoError(t, err)
	require.Equal(t, len(payees), n)
	require.Equal(t, int64(1), trips.RoundTrips()-before, "a retry of the finished batch replays in one round trip")
}
