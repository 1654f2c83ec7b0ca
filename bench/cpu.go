package main

import (
	"context"
	"sync/atomic"
	"time"
)

// cpuCost is the CPU one operation took, split between this process (the client: tempotent's
// Go code and pgx) and everything else on the machine, which while the benchmark runs is
// Postgres (its backends, WAL writer and checkpointer) and the kernel's work for it.
type cpuCost struct{ client, server time.Duration }

// cpuOf runs one block of b and returns its CPU per operation, or false where the machine's
// CPU time cannot be read (/proc/stat is Linux's).
func cpuOf(ctx context.Context, b bench) (cpuCost, bool) {
	self0, all0, ok := cpuTimes()
	if !ok {
		return cpuCost{}, false
	}
	// The harness runs the op more times than the block reports (its calibration runs too):
	// count them all.
	var ops atomic.Int64
	inner := b.op
	b.op = func(ctx context.Context) error {
		ops.Add(1)
		return inner(ctx)
	}
	block(ctx, b)
	self1, all1, _ := cpuTimes()
	n := time.Duration(ops.Load())
	if n == 0 {
		return cpuCost{}, false
	}
	self, all := self1-self0, all1-all0
	return cpuCost{client: self / n, server: max(all-self, 0) / n}, true
}
