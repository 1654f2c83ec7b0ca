package activity_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

// TestRetryReadsBeforeItReserves counts the round trips of each path through the first
// statement: a retry (Attempt 2) of a finished intent is one plain lookup, a retry that finds
// nothing looks up, reserves and completes, and a first attempt reserves at once, answering a
// replay in the same one round trip and a first execution in two.
func TestRetryReadsBeforeItReserves(t *testing.T) {
	ctx := context.Background()
	var trips pgtest.Counter
	schema := pgtest.Schema(t)
	s, err := activity.NewStore(pgtest.CountingPool(t, &trips), &activity.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	calls := 0
	charge := func(attempt int32, id string, fail bool) (int, int64, error) {
		t.Helper()
		c := activity.Call{Key: keys.Key{Namespace: "lookup", Operation: "Charge", ID: id}, Request: id, Attempt: attempt,
			DownstreamDeduplicates: true}
		before := trips.RoundTrips()
		got, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
			calls++
			if fail {
				return 0, temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil)
			}
			return calls, nil
		})
		return got, trips.RoundTrips() - before, err
	}

	got, rt, err := charge(1, "first", false)
	require.NoError(t, err)
	require.Equal(t, 1, got)
	require.Equal(t, int64(2), rt, "a first execution on attempt 1: reserve, complete")

	got, rt, err = charge(2, "first", false)
	require.NoError(t, err)
	require.Equal(t, 1, got, "a retry did not replay")
	require.Equal(t, int64(1), rt, "a retry of a finished intent: one lookup")

	got, rt, err = charge(1, "first", false)
	require.NoError(t, err)
	require.Equal(t, 1, got)
	require.Equal(t, int64(1), rt, "a replay on attempt 1 (a reset workflow): the reserve statement alone")

	got, rt, err = charge(3, "retry", false)
	require.NoError(t, err)
	require.Equal(t, 2, got, "a retry that found no receipt did not run")
	require.Equal(t, int64(3), rt, "a retry that finds nothing: lookup, reserve, complete")

	_, _, err = charge(1, "declined", true)
	require.Error(t, err)
	_, rt, err = charge(2, "declined", true)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr) && appErr.Type() == "CardDeclined", "the recorded failure: %v", err)
	require.Equal(t, int64(1), rt)
	require.Equal(t, 3, calls, "an intent ran twice")

	// The lookup tells a mismatch as reserving does.
	c := activity.Call{Key: keys.Key{Namespace: "lookup", Operation: "Charge", ID: "first"}, Request: "another", Attempt: 2}
	_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) { return 0, nil })
	var mismatch *activity.MismatchError
	require.ErrorAs(t, err, &mismatch)
}
