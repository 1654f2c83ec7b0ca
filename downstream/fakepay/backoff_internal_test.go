package fakepay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoffDoublesUpToTheLimit: the wait after a delivery's nth failed attempt is first,
// doubled n-1 times, and never more than limit.
func TestBackoffDoublesUpToTheLimit(t *testing.T) {
	t.Parallel()
	const first, limit = 5 * time.Millisecond, time.Second
	for _, tc := range []struct {
		attempts int
		want     time.Duration
	}{
		{attempts: 1, want: first},
		{attempts: 2, want: 2 * first},
		{attempts: 4, want: 8 * first},
		{attempts: 8, want: 640 * time.Millisecond},
		{attempts: 9, want: limit},
		{attempts: 1000, want: limit},
	} {
		require.Equal(t, tc.want, backoff(tc.attempts, first, limit), "backoff(%d, %v, %v)", tc.attempts, first, limit)
	}
	require.Equal(t, 12*time.Millisecond, backoff(3, first, 12*time.Millisecond), "a limit between two doublings")
}

// TestRetryWaitIsFullJitter: the wait after a failed delivery is drawn from (0, ceiling], over
// the whole of it, so that deliveries that failed together spread out.
func TestRetryWaitIsFullJitter(t *testing.T) {
	t.Parallel()
	const first, limit = 8 * time.Millisecond, time.Second
	for attempts := 1; attempts <= 10; attempts++ {
		ceiling := backoff(attempts, first, limit)
		lo, hi := ceiling, time.Duration(0)
		for range 500 {
			w := retryWait(attempts, first, limit)
			require.Positive(t, w, "attempt %d", attempts)
			require.LessOrEqual(t, w, ceiling, "attempt %d waits beyond its ceiling", attempts)
			lo, hi = min(lo, w), max(hi, w)
		}
		require.Less(t, lo, ceiling/4, "attempt %d: no wait in the lowest quarter: not full jitter", attempts)
		require.Greater(t, hi, ceiling-ceiling/4, "attempt %d: no wait in the highest quarter", attempts)
	}
}
