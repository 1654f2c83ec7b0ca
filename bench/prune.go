package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempotent/tempotent/outbox"
)

// expireDelivered inserts n delivered messages of the benchmark's content into the outbox, a
// day past the outbox's retention: what Prune deletes.
func expireDelivered(ctx context.Context, d *db, n int) {
	_, err := d.pool.Exec(ctx, `INSERT INTO `+outboxTable+` (id, topic, payload, digest, state, attempts, claimed_by, delivered_at)
		SELECT $1 || i, $2, $3, $4, 'delivered', 1, 'bench#0000000000000000', now() - $5::bigint * interval '1 microsecond' - interval '1 day'
		FROM generate_series(1, $6) i`,
		next("expired-")+"-", messageTopic, messageBody, messageDigest, outbox.RetentionDefault.Microseconds(), n)
	if err != nil {
		fatalf("expired messages: %v", err)
	}
}

// expiredLeft counts the outbox's delivered messages past retention.
func expiredLeft(ctx context.Context, d *db) int {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+`
		WHERE state = 'delivered' AND delivered_at < now() - $1::bigint * interval '1 microsecond'`,
		outbox.RetentionDefault.Microseconds()).Scan(&n)
	if err != nil {
		fatalf("count expired messages: %v", err)
	}
	return n
}

// pruneRates measures, per round, on an outbox holding expired delivered messages (expired of
// them) and n pending ones put beforehand: k dispatchers of the given Concurrency in Run, with
// maintenance on, until every pending message is delivered, giving expired messages pruned per
// second and messages delivered per second over that time; and, on the same table filled again,
// Outbox.Prune called batch after batch until one comes back short with nothing else running,
// giving messages pruned per second (the floor: pruning alone). Rounds alternate which goes
// first. The count of pruned messages is taken once the dispatchers have stopped, a few
// milliseconds after the last delivery: it may include the batches pruning then.
func pruneRates(ctx context.Context, d *db, o *outbox.Outbox, rounds, n, expired, k, concurrency, batch int) (whileDelivering, delivering, alone []float64) {
	fill := putMessages(o, d)
	for r := range rounds {
		for i := range 2 {
			if _, err := d.pool.Exec(ctx, "TRUNCATE "+outboxTable); err != nil {
				fatalf("truncate: %v", err)
			}
			expireDelivered(ctx, d, expired)
			if (i+r)%2 == 0 {
				fill(ctx, n)
				if _, err := d.pool.Exec(ctx, "ANALYZE "+outboxTable); err != nil {
					fatalf("analyze: %v", err)
				}
				took := runUntilDelivered(ctx, o, n, k, concurrency, batch)
				pruned := expired - expiredLeft(ctx, d)
				whileDelivering = append(whileDelivering, float64(pruned)/took.Seconds())
				delivering = append(delivering, float64(n)/took.Seconds())
				continue
			}
			if _, err := d.pool.Exec(ctx, "ANALYZE "+outboxTable); err != nil {
				fatalf("analyze: %v", err)
			}
			start := time.Now()
			var pruned int64
			for {
				got, err := o.Prune(ctx, outbox.PruneBatchDefault)
				if err != nil {
					fatalf("prune: %v", err)
				}
				pruned += got
				if got < outbox.PruneBatchDefault {
					break
				}
			}
			alone = append(alone, float64(pruned)/time.Since(start).Seconds())
		}
	}
	return whileDelivering, delivering, alone
}

// runUntilDelivered runs k dispatchers of o in Run, with maintenance on, until n messages are
// delivered through a publisher that does nothing, stops them, and returns the time from their
// start to the last delivery.
func runUntilDelivered(ctx context.Context, o *outbox.Outbox, n, k, concurrency, batch int) time.Duration {
	var delivered atomic.Int64
	all := make(chan struct{})
	pub := outbox.PublisherFunc(func(context.Context, outbox.Delivery) error {
		if delivered.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	start := time.Now()
	for range k {
		dp, err := outbox.NewDispatcher(o, pub, &outbox.DispatcherConfig{
			Batch: batch, Concurrency: concurrency, Maintenance: time.Hour, Logger: discard,
		})
		if err != nil {
			fatalf("dispatcher: %v", err)
		}
		wg.Go(func() {
			if err := dp.Run(runCtx); err != nil {
				fatalf("run: %v", err)
			}
		})
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		fatalf("%d of %d messages delivered after five minutes", delivered.Load(), n)
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	return took
}
