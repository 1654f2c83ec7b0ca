package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/worker"
)

// The worker's purger: one worker per schema at a time, and a round works off more than one
// batch.
func TestPurgeRoundTakesTurns(t *testing.T) {
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	ctx := context.Background()
	schema := pgtest.Schema(t)
	env, err := worker.Start(ctx, worker.Config{DatabaseURL: pgtest.URL(), Receipts: activity.Config{Schema: schema}, Migrate: true, TemporalCLI: cli, LogLevel: "error"})
	require.NoError(t, err)
	defer env.Close()

	const n = 1500 // more than one batch
	for i := range n {
		k, err := keys.Explicit("default", "", "charge", fmt.Sprint("order-", i))
		require.NoError(t, err)
		fp, err := keys.FingerprintOf(i)
		require.NoError(t, err)
		_, err = activity.Do(ctx, env.Store, activity.Call{Key: k, Fingerprint: fp}, func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}
	_, err = env.Pool.Exec(ctx, "UPDATE "+schema+".receipts SET expires_at = now() - interval '1 second'")
	require.NoError(t, err)

	// Another worker is purging this schema: this one waits its turn.
	other, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = other.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", "tempotent.purge."+schema)
	require.NoError(t, err)
	purged, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	require.False(t, ran, "purged while another worker held the purge lock")
	require.Zero(t, purged)
	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", "tempotent.purge."+schema)
	require.NoError(t, err)
	other.Release()

	// 1.0's PurgeOnce, deprecated, is the same round and counts the receipts.
	once, ran, err := env.PurgeOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, int64(n), once)
	counts, err := env.Operator.CountSince(ctx, time.Time{})
	require.NoError(t, err)
	require.Zero(t, counts.Completed+counts.Pending+counts.Failed, "receipts left after the purge")

	// The lock went back with the round: another session can take it (a pooled connection
	// that kept it would take it again itself, so the check is from a connection of its own).
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var free bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", "tempotent.purge."+schema).Scan(&free))
	require.True(t, free, "the purge lock was not released")
}
