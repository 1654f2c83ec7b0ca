package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tempotent/tempotent/telemetry"
)

// Purging in the worker: each round is bounded, so that a backlog of expired receipts is worked
// off over several rounds rather than in one long burst.
const (
	purgeBatch      = 1000
	purgeMaxBatches = 100
)

// MetricPurged counts the receipts the worker's purger deleted, through the receipt store's
// metrics handler (activity.Config.MetricsHandler), where the purger's gauges of unresolved
// receipts — operator.MetricUnresolved, operator.MetricUnresolvedOldest (how long the oldest has
// waited) and operator.MetricUnresolvedHeld (those kept past their retention) — go too, updated
// on every round.
const MetricPurged = telemetry.ReceiptsPurged

// PurgeOnce deletes receipts past their retention, in batches of a thousand up to a hundred
// thousand, unless another worker of the same schema is purging: then it does nothing and
// reports ran false. Run calls it every Config.PurgeEvery; call it yourself from a job when the
// worker's own purging is off.
func (e *Env) PurgeOnce(ctx context.Context) (purged int64, ran bool, err error) {
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("purge: %w", err)
	}
	// A session lock on a connection of its own: it ends with the round, or with the process.
	lock := "tempotent.purge." + e.Operator.Config().Schema
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", lock).Scan(&ran); err != nil || !ran {
		conn.Release()
		if err != nil {
			return 0, false, fmt.Errorf("purge: take the lock: %w", err)
		}
		return 0, false, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext($1))", lock); err != nil {
			// The connection must not go back to the pool still holding the lock.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	metrics := e.Operator.Config().MetricsHandler
	for range purgeMaxBatches {
		n, err := e.Operator.Purge(ctx, purgeBatch)
		purged += n
		metrics.Counter(MetricPurged).Inc(n)
		if err != nil {
			return purged, true, err
		}
		if n < purgeBatch {
			break
		}
	}
	return purged, true, nil
}

// purgeLoop calls PurgeOnce every PurgeEvery, give or take a fifth, until ctx ends.
func (e *Env) purgeLoop(ctx context.Context) {
	every := e.Config.PurgeEvery
	for {
		wait := every - every/5 + rand.N(2*every/5+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		purged, ran, err := e.PurgeOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.Log.Warn("purge failed; retrying at the next round", "err", err, "purged", purged)
		case ran && purged > 0:
			e.Log.Info("purged expired receipts", "count", purged)
		}
	}
}
