package main

import (
	"context"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuCost is the CPU one operation took, split between this process (the client: tempotent's
// Go code and pgx) and everything else on the machine, which while the benchmark runs is
// Postgres (its backends, WAL writer and checkpointer) and the kernel's work for it.
type cpuCost struct {
	client, server time.Duration
	// busy is the share of the machine's CPUs in use while the block ran (1: all of them): below
	// 1, what bounds the rate is not CPU but waiting.
	busy float64
}

// cpuOf measures b's CPU per operation over a run of about cpuRun, or returns false where the
// machine's CPU time cannot be read (/proc/stat is Linux's). It measures one run of a fixed
// number of operations, sized by a block first: a block's calibration runs (one operation, then
// a few) would count time in which the workers were not all busy.
func cpuOf(ctx context.Context, b bench) (cpuCost, bool) {
	n := max(int(float64(cpuRun)/block(ctx, b)), 1)
	self0, all0, ok := cpuTimes()
	if !ok {
		return cpuCost{}, false
	}
	start := time.Now()
	if err := run(ctx, b, n); err != nil {
		fatalf("%s: %v", b.name, err)
	}
	elapsed := time.Since(start)
	self1, all1, _ := cpuTimes()
	self, all := self1-self0, all1-all0
	return cpuCost{
		client: self / time.Duration(n), server: max(all-self, 0) / time.Duration(n),
		busy: float64(all) / (float64(elapsed) * float64(runtime.NumCPU())),
	}, true
}

// cpuRun is how long cpuOf measures: /proc/stat counts in ticks of 10 ms.
const cpuRun = time.Second

// syncsOf is the WAL flushes per operation of one run of b of about cpuRun, counted by
// pg_stat_wal: every backend's and the WAL writer's, so it is only meaningful while nothing else
// writes.
func syncsOf(ctx context.Context, stats *pgxpool.Pool, b bench) float64 {
	n := max(int(float64(cpuRun)/block(ctx, b)), 1)
	before := walSyncs(ctx, stats)
	if err := run(ctx, b, n); err != nil {
		fatalf("%s: %v", b.name, err)
	}
	return float64(walSyncs(ctx, stats)-before) / float64(n)
}
