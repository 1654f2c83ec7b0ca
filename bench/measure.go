package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// An op is one operation of a benchmark: a call, a statement, a workflow.
type op func(ctx context.Context) error

// times is o n times in a row, as one op.
func times(n int, o op) op {
	return func(ctx context.Context) error {
		for range n {
			if err := o(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// A bench is an op run by workers goroutines at once (one when workers is 0).
type bench struct {
	name    string
	op      op
	workers int
}

// interleave measures the benches in blocks of Go's benchmark harness (testing.Benchmark, each
// block as long as -test.benchtime), round-robin: in round r the first bench is the r-th, so
// that no bench always runs right after the same other one. It returns each bench's ns/op per
// round, so that ratios can be taken within a round, where the machine was in the same mood.
func interleave(ctx context.Context, rounds int, benches ...bench) [][]float64 {
	out := make([][]float64, len(benches))
	for r := range rounds {
		for i := range benches {
			j := (i + r) % len(benches)
			out[j] = append(out[j], block(ctx, benches[j]))
		}
	}
	return out
}

// block runs one block of b and returns its ns/op.
func block(ctx context.Context, b bench) float64 {
	var failed error // the first error; the harness may call the function again after it
	res := testing.Benchmark(func(tb *testing.B) {
		if failed != nil {
			return
		}
		if b.workers <= 1 {
			for tb.Loop() {
				if failed = b.op(ctx); failed != nil {
					return
				}
			}
			return
		}
		failed = run(ctx, b, tb.N)
	})
	if failed != nil {
		fatalf("%s: %v", b.name, failed)
	}
	return float64(res.T.Nanoseconds()) / float64(res.N)
}

// run runs b's op n times in all, spread over b.workers goroutines, and returns the first error.
func run(ctx context.Context, b bench, n int) error {
	var (
		next   atomic.Int64
		failed error
		once   sync.Once
		wg     sync.WaitGroup
	)
	for range max(b.workers, 1) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := b.op(ctx); err != nil {
					once.Do(func() { failed = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// perRound applies f to each round's figures and returns the median of the results.
func perRound(series [][]float64, f func(round []float64) float64) float64 {
	return median(rounds(series, f))
}

// lowest and highest are the extremes of f over the rounds: the spread that a median hides.
func lowest(series [][]float64, f func(round []float64) float64) float64 {
	return slices.Min(rounds(series, f))
}

func highest(series [][]float64, f func(round []float64) float64) float64 {
	return slices.Max(rounds(series, f))
}

func rounds(series [][]float64, f func(round []float64) float64) []float64 {
	var out []float64
	for r := range series[0] {
		round := make([]float64, len(series))
		for i := range series {
			round[i] = series[i][r]
		}
		out = append(out, f(round))
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// costs are what one operation costs the database: round trips (counted by a pgx tracer on the
// pool the operation uses) and WAL syncs (pg_stat_wal.wal_sync, which counts every flush of the
// server's WAL to disk, by any process).
type costs struct{ roundTrips, walSyncs float64 }

// count runs op n times, one after another, and returns its costs per operation. pg_stat_wal is
// server-wide and each backend reports into it at most once a second, so count waits for the
// reports before each reading; nothing else should write to this server meanwhile.
func count(ctx context.Context, stats *pgxpool.Pool, counter *pgtest.Counter, n int, o op) costs {
	before := walSyncs(ctx, stats)
	counter.Reset()
	for range n {
		if err := o(ctx); err != nil {
			fatalf("count: %v", err)
		}
	}
	rt := counter.RoundTrips()
	after := walSyncs(ctx, stats)
	return costs{roundTrips: float64(rt) / float64(n), walSyncs: float64(after-before) / float64(n)}
}

func walSyncs(ctx context.Context, stats *pgxpool.Pool) int64 {
	time.Sleep(1100 * time.Millisecond) // PGSTAT_MIN_INTERVAL: every backend has reported by now
	var n int64
	if err := stats.QueryRow(ctx, "SELECT wal_sync FROM pg_stat_wal").Scan(&n); err != nil {
		fatalf("read pg_stat_wal: %v", err)
	}
	return n
}

// fatalf ends the run: main recovers the panic, prints it and exits 1.
func fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
