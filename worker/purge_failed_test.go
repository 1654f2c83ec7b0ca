package worker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/worker"
)

// A purge round that fails is counted: the unresolved receipts' gauges keep the last good
// round's values meanwhile, so the counter is what an alert on a purge that stopped working reads.
func TestPurgeRoundCountsItsFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	met := &counters{}
	env := purgeEnv(t, schema, 0, met)
	_, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, met.get(worker.MetricPurgeFailed), "a round that worked was counted as failed")

	_, err = pgtest.Pool(t).Exec(ctx, `ALTER TABLE `+schema+`.inbox RENAME TO inbox_away`)
	require.NoError(t, err)
	_, ran, err = env.PurgeRound(ctx)
	require.Error(t, err)
	require.True(t, ran)
	require.Equal(t, int64(1), met.get(worker.MetricPurgeFailed))
}
