package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/telemetry"
)

// Purging in the worker: each round is bounded, so that a backlog of expired receipts or inbox
// records is worked off over several rounds rather than in one long burst.
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

// MetricPurgeFailed counts the purge rounds that failed, through the same handler as
// MetricPurged: the gauges of unresolved receipts are not updated by a failed round, so this is
// what tells a purge that has stopped working.
const MetricPurgeFailed = telemetry.PurgeFailed

// MetricInboxPurged counts the inbox records (those of inbox consumers and of webhook handlers)
// the worker's purger deleted, through the same handler as MetricPurged.
const MetricInboxPurged = telemetry.InboxPurged

// Purged is what one purge round deleted.
type Purged struct {
	// Receipts past their retention (operator.Client.Purge).
	Receipts int64
	// Inbox records, of every consumer and webhook source of the schema, processed more than
	// Config.InboxRetention ago (operator.Client.PurgeInbox).
	Inbox int64
	// WebhookTallies are the rows of the webhook intakes' tallies older than
	// operator.WebhookTalliesRetention (operator.Client.PurgeWebhookTallies).
	WebhookTallies int64
}

// ErrRoundNotRecorded is matched by PurgeRound's error when the round ran but its record in the
// maintenance runs (operator.Client.RecordMaintenanceRun) could not be written. The purge's own
// error, when it failed too, comes first and matches as it did.
var ErrRoundNotRecorded = errors.New("purge round not recorded")

// PurgeRound deletes receipts past their retention, then the schema's inbox records older than
// Config.InboxRetention (none when it is negative), then the webhook tallies older than
// operator.WebhookTalliesRetention, each in batches of a thousand up to a hundred thousand,
// unless another worker of the same schema is purging: then it does nothing, records nothing and
// reports ran false. Run calls it every Config.PurgeEvery; call it yourself from a job when the
// worker's own purging is off. On an error it returns what it deleted before it, purges nothing
// after the purge that failed, and counts MetricPurgeFailed.
//
// A round that ran is recorded as the last run of operator.TaskPurge
// (operator.Client.MaintenanceRuns), by this host and process, with what it deleted and its
// error if it failed, for the console and tempotent doctor; a round cut short by the end of ctx
// is not. A record that cannot be written adds an error matching ErrRoundNotRecorded to the
// purge's own, which it never hides, and is not counted as a failed purge.
func (e *Env) PurgeRound(ctx context.Context) (purged Purged, ran bool, err error) {
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return Purged{}, false, fmt.Errorf("purge: %w", err)
	}
	// A session lock on a connection of its own: it ends with the round, or with the process.
	lock := "tempotent.purge." + e.Operator.Config().Schema
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", lock).Scan(&ran); err != nil || !ran {
		conn.Release()
		if err != nil {
			return Purged{}, false, fmt.Errorf("purge: take the lock: %w", err)
		}
		return Purged{}, false, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext($1))", lock); err != nil {
			// The connection must not go back to the pool still holding the lock.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	started := time.Now()
	purged, err = e.purge(ctx)
	if err != nil && ctx.Err() != nil {
		return purged, true, err
	}
	if err != nil {
		e.Operator.Config().MetricsHandler.Counter(MetricPurgeFailed).Inc(1)
	}
	run := operator.MaintenanceRun{Task: operator.TaskPurge, Runner: runner(), Started: started, Finished: time.Now(),
		Receipts: purged.Receipts, Inbox: purged.Inbox}
	if err != nil {
		run.Error = err.Error()
	}
	// Recorded under the purge lock, so that rounds are recorded in the order they ran.
	if rerr := e.Operator.RecordMaintenanceRun(context.WithoutCancel(ctx), run); rerr != nil {
		err = errors.Join(err, fmt.Errorf("%w: %w", ErrRoundNotRecorded, rerr))
	}
	return purged, true, err
}

// purge is a round's work, once it holds the purge lock.
func (e *Env) purge(ctx context.Context) (purged Purged, err error) {
	metrics := e.Operator.Config().MetricsHandler
	purged.Receipts, err = inBatches(metrics.Counter(MetricPurged), func(limit int) (int64, error) {
		return e.Operator.Purge(ctx, limit)
	})
	if err != nil {
		return purged, err
	}
	if retention := cmp.Or(e.Config.InboxRetention, InboxRetentionDefault); retention > 0 {
		purged.Inbox, err = inBatches(metrics.Counter(MetricInboxPurged), func(limit int) (int64, error) {
			return e.Operator.PurgeInbox(ctx, retention, limit)
		})
		if err != nil {
			return purged, err
		}
	}
	purged.WebhookTallies, err = inBatches(client.MetricsNopHandler.Counter(""), func(limit int) (int64, error) {
		return e.Operator.PurgeWebhookTallies(ctx, operator.WebhookTalliesRetention, limit)
	})
	return purged, err
}

// runner names this process in the record of maintenance runs: host/pid, as a dispatcher's
// name begins (outbox.DispatcherConfig.Name).
func runner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// PurgeOnce is PurgeRound as 1.0 had it: purged counts the receipts deleted only.
//
// Deprecated: use PurgeRound, which also reports the inbox records it deleted; removed in the
// release after next.
func (e *Env) PurgeOnce(ctx context.Context) (purged int64, ran bool, err error) {
	p, ran, err := e.PurgeRound(ctx)
	return p.Receipts, ran, err
}

// inBatches calls purge with purgeBatch until it deletes fewer, at most purgeMaxBatches times,
// counting what it deletes in counter.
func inBatches(counter client.MetricsCounter, purge func(limit int) (int64, error)) (purged int64, err error) {
	for range purgeMaxBatches {
		n, err := purge(purgeBatch)
		purged += n
		counter.Inc(n)
		if err != nil || n < purgeBatch {
			return purged, err
		}
	}
	return purged, nil
}

// purgeLoop calls PurgeRound every PurgeEvery, give or take a fifth, until ctx ends.
func (e *Env) purgeLoop(ctx context.Context) {
	every := e.Config.PurgeEvery
	for {
		wait := every - every/5 + rand.N(2*every/5+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		purged, ran, err := e.PurgeRound(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.Log.Warn("purge round failed or not recorded; retrying at the next round", "err", err, "receipts", purged.Receipts, "inbox", purged.Inbox, "webhook_tallies", purged.WebhookTallies)
		case ran && purged.Receipts+purged.Inbox+purged.WebhookTallies > 0:
			e.Log.Info("purged expired records", "receipts", purged.Receipts, "inbox", purged.Inbox, "webhook_tallies", purged.WebhookTallies)
		}
	}
}
