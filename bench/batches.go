package main

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// tracer counts round trips (pgtest.Counter) and, for row 4, how many attempts each of the
// receipt store's writes carried: its batch statements (reservations, completions) hold one
// element per attempt in their first array, and its single-key statements one attempt. Told
// apart by their text, which is the engine's (internal/engine/sql.go).
type tracer struct {
	pgtest.Counter
	mu                          sync.Mutex
	reserveSizes, completeSizes map[int]int // attempts per statement → statements
}

func newTracer() *tracer {
	return &tracer{reserveSizes: map[int]int{}, completeSizes: map[int]int{}}
}

// TraceBatchQuery implements pgx.BatchTracer: every receipt statement goes in a batch, behind
// its settings or alone.
func (t *tracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	sql := strings.TrimSpace(d.SQL)
	n := 1
	if strings.HasPrefix(sql, "WITH b AS") && len(d.Args) > 0 {
		if ids, ok := d.Args[0].([]string); ok {
			n = len(ids)
		}
	}
	var sizes map[int]int
	switch {
	case strings.HasPrefix(sql, "WITH b AS") && strings.Contains(sql, "INSERT INTO"),
		strings.HasPrefix(sql, "WITH existing AS") && strings.Contains(sql, "INSERT INTO"):
		sizes = t.reserveSizes
	case strings.HasPrefix(sql, "WITH b AS") && strings.Contains(sql, "UPDATE"),
		strings.HasPrefix(sql, "WITH target AS"),
		strings.HasPrefix(sql, "UPDATE") && strings.Contains(sql, "SET state = $8"):
		sizes = t.completeSizes
	default:
		return
	}
	t.mu.Lock()
	sizes[n]++
	t.mu.Unlock()
}

// batchSizes is what the tracer counted: statements and attempts of each kind.
type batchSizes struct{ reserveStmts, reserves, completeStmts, completes, reserveOnes, completeOnes int }

// take returns the counts since the last take and starts again from zero.
func (t *tracer) take() batchSizes {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b batchSizes
	for n, k := range t.reserveSizes {
		b.reserveStmts, b.reserves = b.reserveStmts+k, b.reserves+n*k
		if n == 1 {
			b.reserveOnes += k
		}
	}
	for n, k := range t.completeSizes {
		b.completeStmts, b.completes = b.completeStmts+k, b.completes+n*k
		if n == 1 {
			b.completeOnes += k
		}
	}
	clear(t.reserveSizes)
	clear(t.completeSizes)
	return b
}

// batchShape runs receipts through db's store at workers at once for about cpuRun and returns
// what its statements carried, and its round trips per receipt.
func batchShape(ctx context.Context, db *db, workers int) (batchSizes, float64) {
	b := bench{name: "receipt", op: receipt(db.store), workers: workers}
	n := max(int(float64(cpuRun)/block(ctx, b)), 1)
	db.tracer.take()
	before := db.counter.RoundTrips()
	if err := run(ctx, b, n); err != nil {
		fatalf("%s: %v", b.name, err)
	}
	return db.tracer.take(), float64(db.counter.RoundTrips()-before) / float64(n)
}

// meanReserve and meanComplete are the mean attempts per statement of each kind; mean is the
// mean over both kinds' statements.
func (b batchSizes) meanReserve() float64 {
	return float64(b.reserves) / float64(max(b.reserveStmts, 1))
}
func (b batchSizes) meanComplete() float64 {
	return float64(b.completes) / float64(max(b.completeStmts, 1))
}
func (b batchSizes) mean() float64 {
	return float64(b.reserves+b.completes) / float64(max(b.reserveStmts+b.completeStmts, 1))
}
