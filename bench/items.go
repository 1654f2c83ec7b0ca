package main

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// itemRows: row 10, per-item receipts. A batch of n items through ForEach (each item reserved,
// called and completed under its own receipt), one at a time and eight at once, against a bare
// durable INSERT per item; and a retry of a settled batch, which reads every item's receipt in
// one statement and replays them.
func itemRows(ctx context.Context, t *table, col, rounds int, db *db) {
	for _, n := range []int{100, 1000} {
		s := interleave(ctx, rounds,
			bench{name: "ForEach", op: batch(db.store, n, 1)},
			bench{name: "ForEach, 8 at once", op: batch(db.store, n, 8)},
			bench{name: "settled batch", op: settledBatch(ctx, db.store, n, nil)},
			bench{name: "INSERT per item", op: inserts(db.pool, n)},
		)
		const one, eight, settled, bare = 0, 1, 2, 3
		t.set("10", fmt.Sprintf("ForEach, %d items: per item ÷ a durable INSERT per item", n), col,
			perRound(s, func(r []float64) float64 { return r[one] / r[bare] }), ratio, "")
		target := ""
		if n == 1000 {
			target = "≤ 1.0"
		}
		t.set("10", fmt.Sprintf("ForEach, %d items, 8 at once: per item ÷ a durable INSERT per item", n), col,
			perRound(s, func(r []float64) float64 { return r[eight] / r[bare] }), ratio, target)
		t.set("10", fmt.Sprintf("ForEach, %d items: per item, µs", n), col,
			perRound(s, func(r []float64) float64 { return r[one] / float64(n) / 1e3 }), micros, "")
		t.set("10", fmt.Sprintf("retry of a settled %d-item batch: per item, µs", n), col,
			perRound(s, func(r []float64) float64 { return r[settled] / float64(n) / 1e3 }), micros, "")
	}
	// What items cost the database, per item: a 100-item batch, one at a time and eight at once
	// (whose completions share commits), and a retry of a settled one (its round trips are the
	// batch's, not per item: one read for all the items, two for the batch's own receipt — one
	// statement that reads and takes it over, and its release).
	const n = 100
	for _, concurrency := range []int{1, 8} {
		c := count(ctx, db.pool, db.counter, 5, batch(db.store, n, concurrency))
		t.set("10", fmt.Sprintf("ForEach, %d at once: round trips per item", concurrency), col, c.roundTrips/n, number, "")
		t.setJudged("10", fmt.Sprintf("ForEach, %d at once: WAL syncs per item", concurrency), col, c.walSyncs/n, number, "", 1)
	}
	var forEach int64 // the round trips of ForEach alone, inside the batch's own receipt
	settled := settledBatch(ctx, db.store, n, func(run func() error) error {
		before := db.counter.RoundTrips()
		err := run()
		forEach += db.counter.RoundTrips() - before
		return err
	})
	forEach = 0 // not the run that settled the items
	c := count(ctx, db.pool, db.counter, 5, settled)
	t.set("10", "retry of a settled batch: round trips per batch, its own receipt's 2 included", col, c.roundTrips, number, "≤ 1")
	t.set("10", "retry of a settled batch: round trips of ForEach (its items)", col, float64(forEach)/5, number, "≤ 1")
}

type item struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func itemsN(n int) []item {
	items := make([]item, n)
	for i := range items {
		items[i] = item{ID: fmt.Sprint("payee-", i), Amount: 100 + i}
	}
	return items
}

// batchCall is the receipt a batch runs under outside Temporal: Do around ForEach, declared
// safe to run again (its items are its receipts).
func batchCall(id string) activity.Call {
	return activity.Call{
		Key:                    keys.Key{Namespace: "bench", Operation: "PayOut", ID: id},
		Request:                id,
		DownstreamDeduplicates: true,
		DownstreamKeyMemory:    math.MaxInt64,
	}
}

func runBatch(ctx context.Context, s *activity.Store, items []item, concurrency int) (int, error) {
	results, err := activity.ForEach(ctx, s, items, activity.Items[item]{ID: func(i item) string { return i.ID }, Operation: "Pay", Concurrency: concurrency,
		Options: activity.Options{DownstreamDeduplicates: true}}, // as row 1's calls: one WAL flush each
		func(context.Context, item) (int, error) { return 1, nil })
	return len(results), err
}

// batch runs a new batch of n items.
func batch(s *activity.Store, n, concurrency int) op {
	items := itemsN(n)
	return func(ctx context.Context) error {
		_, err := activity.Do(ctx, s, batchCall(next("batch-")), func(ctx context.Context) (int, error) {
			return runBatch(ctx, s, items, concurrency)
		})
		return err
	}
}

// errAgain makes the batch's own receipt let go, so that the next op takes it over and runs
// ForEach again over items that are all settled.
var errAgain = errors.New("run the batch again")

// settledBatch runs ForEach again over one batch whose n items are settled. Each op is a retry
// (Call.Attempt 2, as a Temporal retry's own attempt is), which takes over the batch's own
// receipt in the statement that reads it, and releases it: two round trips spread over n items.
// around, when set, wraps each op's ForEach (the first, which settles the items, too).
func settledBatch(ctx context.Context, s *activity.Store, n int, around func(func() error) error) op {
	items := itemsN(n)
	c := batchCall(next("settled-"))
	c.Attempt = 2
	if around == nil {
		around = func(run func() error) error { return run() }
	}
	run := func(ctx context.Context) error {
		_, err := activity.Do(ctx, s, c, func(ctx context.Context) (int, error) {
			if err := around(func() error { _, err := runBatch(ctx, s, items, 1); return err }); err != nil {
				return 0, err
			}
			return 0, errAgain
		})
		if errors.Is(err, errAgain) {
			return nil
		}
		return err
	}
	if err := run(ctx); err != nil {
		fatalf("settle a batch: %v", err)
	}
	return run
}

// inserts is n bare durable INSERTs, one after another.
func inserts(p *pgxpool.Pool, n int) op {
	one := insert(p)
	return func(ctx context.Context) error {
		for range n {
			if err := one(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
