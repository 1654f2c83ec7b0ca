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
