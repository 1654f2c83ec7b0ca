package activity_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
)

// requireFullJitter checks that delays spread over the whole of (0, max]: none outside it, and
// some in its first and last quarters. With 200 uniform draws, missing a quarter has a chance of
// (3/4)^200, about 1e-25: the check is deterministic in all but name.
func requireFullJitter(t *testing.T, delays []time.Duration, maxDelay time.Duration) {
	t.Helper()
	lo, hi := maxDelay, time.Duration(0)
	for _, d := range delays {
		require.Greater(t, d, time.Duration(0))
		require.LessOrEqual(t, d, maxDelay)
		lo, hi = min(lo, d), max(hi, d)
	}
	require.Less(t, lo, maxDelay/4, "duplicates are told to retry together: no jitter (all in [%v, %v])", lo, hi)
	require.Greater(t, hi, maxDelay*3/4, "the retries do not spread over the whole delay (all in [%v, %v])", lo, hi)
}

// Duplicates that find a live attempt are told to retry after a delay with full jitter: drawn
// from (0, the time the key stays busy], so that many duplicates of one key do not all come back
// at once (before, every one of them got the same delay).
func TestInProgressRetriesHaveFullJitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const delayMax = time.Second

	t.Run("Do", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, &activity.Config{InProgressDelayMax: delayMax, InProgressWait: -1})
		c := call(t, "order-1/charge", map[string]int{"amount": 100})
		c.Lease = time.Hour
		resume, done := pausedAttempt(ctx, s, c, 1, nil)
		defer func() { resume(); <-done }()
		var delays []time.Duration
		for range 200 {
			_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return 2, nil })
			var inProgress *activity.InProgressError
			require.ErrorAs(t, err, &inProgress)
			delays = append(delays, inProgress.RetryAfter)
		}
		requireFullJitter(t, delays, delayMax)
	})

	t.Run("DoInNewTxFindsAPendingReceipt", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, &activity.Config{InProgressDelayMax: delayMax, InProgressWait: -1})
		c := call(t, "order-2/charge", map[string]int{"amount": 100})
		c.Lease = time.Hour
		resume, done := pausedAttempt(ctx, s, c, 1, nil) // a key shared with Do: a pending receipt
		defer func() { resume(); <-done }()
		var delays []time.Duration
		for range 200 {
			_, err := activity.DoInNewTx(ctx, s, c, func(context.Context, pgx.Tx) (int, error) { return 2, nil })
			var inProgress *activity.InProgressError
			require.ErrorAs(t, err, &inProgress)
			delays = append(delays, inProgress.RetryAfter)
		}
		requireFullJitter(t, delays, delayMax)
	})
}
