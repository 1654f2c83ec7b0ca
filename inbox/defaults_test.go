package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// With Config.Retention left zero, a processed message is remembered for RetentionDefault, a
// week: a redelivery within it is a duplicate, and Purge removes only what is older.
func TestDefaultRetentionKeepsAWeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper"})
	for _, id := range []string{"six-days", "eight-days"} {
		_, err := ib.Process(ctx, inbox.Message{ID: id}, ship(name, id))
		require.NoError(t, err)
	}
	_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".inbox SET processed_at = now() - interval '6 days 23 hours' WHERE message_id = 'six-days'")
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".inbox SET processed_at = now() - interval '7 days 1 hour' WHERE message_id = 'eight-days'")
	require.NoError(t, err)

	n, err := ib.Purge(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "Purge removed records within the default retention of a week, or none past it")
	ran, err := ib.Process(ctx, inbox.Message{ID: "six-days"}, ship(name, "six-days"))
	require.NoError(t, err)
	require.False(t, ran, "a message processed within the week ran again")
}

// With Config.LockTimeout left zero, a duplicate waits up to LockTimeoutDefault (2 s) for a
// concurrent delivery to commit, and is then acknowledged without running: a delivery that
// commits within a fraction of a second does not make its duplicate fail.
func TestDefaultLockTimeoutWaitsForAConcurrentDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper"})
	holding := holdClaim(t, ib, inbox.Message{ID: "evt-1"})

	type result struct {
		ran bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ran, err := ib.Process(ctx, inbox.Message{ID: "evt-1"}, ship(name, "evt-1"))
		done <- result{ran, err}
	}()
	time.Sleep(200 * time.Millisecond) // the duplicate is waiting on the claim
	require.NoError(t, holding.Commit(ctx))
	got := <-done
	require.NoError(t, got.err, "the duplicate gave up before the default lock timeout")
	require.False(t, got.ran)
	require.Zero(t, shipments(t, name))
}
