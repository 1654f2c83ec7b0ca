package outbox

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The shutdown grace, on a fake clock (testing/synctest): the context a dispatch publishes under
// lives while the dispatcher's context does, ends exactly ShutdownGrace after that one ends, and
// ends at once when the dispatch releases it; a release before the shutdown leaves no timer
// behind to fire later.
func TestShutdownGraceIsExact(t *testing.T) {
	const grace = 3 * time.Second
	d := &Dispatcher{cfg: DispatcherConfig{ShutdownGrace: grace}}

	t.Run("EndsGraceAfterTheShutdown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, shutdown := context.WithCancel(context.Background())
			graceCtx, release := d.graceAfter(ctx)
			defer release()
			time.Sleep(time.Hour)
			require.NoError(t, graceCtx.Err(), "the grace ended while the dispatcher was running")
			shutdown()
			began := time.Now()
			time.Sleep(grace - time.Nanosecond)
			require.NoError(t, graceCtx.Err(), "the grace ended before ShutdownGrace had passed")
			<-graceCtx.Done()
			require.Equal(t, grace, time.Since(began), "the grace did not last ShutdownGrace")
		})
	})
	t.Run("EndsAtRelease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, shutdown := context.WithCancel(context.Background())
			defer shutdown()
			graceCtx, release := d.graceAfter(ctx)
			release()
			require.Error(t, graceCtx.Err(), "a released grace still lives")
			shutdown() // after the release: no timer may start, or synctest finds it waiting
			synctest.Wait()
		})
	})
	t.Run("ReleaseDuringTheGraceStopsItsTimer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, shutdown := context.WithCancel(context.Background())
			graceCtx, release := d.graceAfter(ctx)
			shutdown()
			time.Sleep(grace / 2)
			release()
			require.Error(t, graceCtx.Err())
			synctest.Wait()
		})
	})
}

// A failed message's backoff doubles from BackoffMin with each attempt, capped at BackoffMax, and
// is drawn with full jitter below that ceiling: messages failing together do not come back
// together, and none comes back sooner than BackoffMin or later than BackoffMax.
func TestBackoffDoublesWithFullJitter(t *testing.T) {
	d := &Dispatcher{cfg: DispatcherConfig{BackoffMin: time.Second, BackoffMax: time.Minute}}
	for attempt := 1; attempt <= 70; attempt++ {
		ceiling := time.Minute
		if attempt <= 6 {
			ceiling = min(time.Second<<attempt, time.Minute)
		}
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 500 {
			b := d.backoff(attempt)
			require.GreaterOrEqual(t, b, time.Second, "attempt %d backs off less than BackoffMin", attempt)
			require.LessOrEqual(t, b, ceiling, "attempt %d backs off beyond its ceiling %s", attempt, ceiling)
			lo, hi = min(lo, b), max(hi, b)
		}
		if spread := ceiling - time.Second; spread > 0 {
			require.Less(t, lo, time.Second+spread/4, "attempt %d: no backoff in the lowest quarter: not jittered", attempt)
			require.Greater(t, hi, ceiling-spread/4, "attempt %d: no backoff in the highest quarter: not jittered", attempt)
		}
	}
}
