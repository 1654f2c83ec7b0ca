package operator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

func TestPurgeRemovesOnlyExpiredRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	held := &gaugeRecorder{}
	s, op, schema := setup(t, &activity.Config{MetricsHandler: held})
	if on, err := op.Partitioned(ctx); err != nil || on {
		t.Skip("a partitioned table is purged a day at a time: TestPurgeDropsRetiredPartitionsAndKeepsWhatMustStay")
	}
	db := pgtest.Pool(t)
	run := func(id string, lease time.Duration, crash bool) keys.Key {
		c := call(t, id, map[string]int{"amount": 1})
		c.Lease = lease
		if crash {
			receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		} else {
			_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return 1, nil })
			require.NoError(t, err)
		}
		return c.Key
	}
	expire := func(k keys.Key) {
		_, err := db.Exec(ctx, "UPDATE "+schema+".receipts SET expires_at = now() - interval '1 second' WHERE id = $1", k.ID)
		require.NoError(t, err)
	}
	expiredDone := []keys.Key{run("done-1", 0, false), run("done-2", 0, false), run("done-3", 0, false)}
	for _, k := range expiredDone {
		expire(k)
	}
	fresh := run("fresh", 0, false)
	livePending := run("live", time.Hour, true)
	expire(livePending) // expired by date, but its lease still runs: must stay
	// An attempt that died after its effect, its lease over and its retention past: nobody
	// knows whether the effect happened, so it is never purged.
	deadPending := run("dead", time.Millisecond, true)
	time.Sleep(5 * time.Millisecond)
	expire(deadPending)
	// An attempt that failed before sending anything: nothing to remember once it expires.
	neverSent := call(t, "never-sent", map[string]int{"amount": 1})
	_, err := activity.Do(ctx, s, neverSent, func(context.Context) (int, error) {
		return 0, activity.NotApplied(errors.New("connection refused"))
	})
	require.Error(t, err)
	expire(neverSent.Key)

	n, err := op.Purge(ctx, 2) // bounded: two at a time
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = op.Purge(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = op.Purge(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), n)
	unresolved, err := op.Unresolved(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), unresolved, "the dead attempt's receipt is the one unresolved")
	require.Equal(t, 1.0, held.value(operator.MetricUnresolvedHeld), "the receipt kept back is not reported")
	require.Equal(t, 1.0, held.value(operator.MetricUnresolved), "the unresolved receipt is not reported")
	require.Greater(t, held.value(operator.MetricUnresolvedOldest), 0.0, "the unresolved receipt's wait is not reported")

	var left []string
	rows, err := db.Query(ctx, "SELECT id FROM "+schema+".receipts ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{deadPending.ID, fresh.ID, livePending.ID}, left)
}

// gaugeRecorder is a metrics handler that keeps the last value of each gauge.
type gaugeRecorder struct {
	client.MetricsHandler
	mu     sync.Mutex
	gauges map[string]float64
}

func (g *gaugeRecorder) Gauge(name string) client.MetricsGauge {
	return gaugeFunc(func(v float64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.gauges == nil {
			g.gauges = map[string]float64{}
		}
		g.gauges[name] = v
	})
}

func (g *gaugeRecorder) value(name string) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gauges[name]
}

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

// PurgeInbox deletes records of every consumer processed before olderThan, up to limit, and
// keeps the younger; it refuses an olderThan that no consumer's retention could be.
func TestPurgeInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, op, schema := setupPlain(t, &activity.Config{})
	db := pgtest.Pool(t)
	_, err := db.Exec(ctx, "INSERT INTO "+schema+`.inbox (consumer, message_id, processed_at) VALUES
		('billing', 'old', now() - interval '2 hours'), ('webhook/stripe', 'old', now() - interval '3 hours'),
		('shipping', 'old', now() - interval '61 minutes'), ('billing', 'new', now() - interval '59 minutes')`)
	require.NoError(t, err)

	_, err = op.PurgeInbox(ctx, 59*time.Second, 0)
	require.ErrorContains(t, err, "at least a minute")
	n, err := op.PurgeInbox(ctx, time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "limit")
	n, err = op.PurgeInbox(ctx, time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	var left []string
	rows, err := db.Query(ctx, "SELECT consumer || '|' || message_id FROM "+schema+".inbox")
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		left = append(left, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"billing|new"}, left)
}
