// Package pgtest gives tests a real Postgres: one lazily created pool per test binary, a fresh
// schema per test that is dropped when the test ends, and a tracer that counts round trips.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DatabaseURLDefault is used when TEST_DATABASE_URL is not set.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/postgres"

// URL returns TEST_DATABASE_URL, or DatabaseURLDefault.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DatabaseURLDefault
}

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// Pool returns the shared pool of the test binary, failing the test if Postgres does not
// answer.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	poolOnce.Do(func() {
		pool, poolErr = pgxpool.New(context.Background(), URL())
		if poolErr == nil {
			poolErr = pool.Ping(context.Background())
		}
	})
	if poolErr != nil {
		tb.Fatalf("pgtest: Postgres at %s (TEST_DATABASE_URL) does not answer: %v", URL(), poolErr)
	}
	return pool
}

// Close closes the shared pool, if Pool created one. It is for TestMain, after the tests have
// run (leaktest.VerifyTestMain calls it), so that a leak check does not see the pool's
// goroutines; no test may call Pool after it.
func Close() {
	if pool != nil {
		pool.Close()
	}
}

// Schema creates a uniquely named schema, drops it with everything in it when tb ends, and
// returns its name.
func Schema(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test_" + hex.EncodeToString(b[:])
	if _, err := p.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create schema: %v", err)
	}
	tb.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// Counter is a pgx tracer that counts round trips: each query, Exec, BEGIN and COMMIT is one,
// and so is a whole batch.
type Counter struct{ n atomic.Int64 }

// RoundTrips returns the round trips counted so far.
func (c *Counter) RoundTrips() int64 { return c.n.Load() }

// Reset sets the count to zero.
func (c *Counter) Reset() { c.n.Store(0) }

// TraceQueryStart implements pgx.QueryTracer. Queries inside a batch are not traced here.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (c *Counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (c *Counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// CountingPool returns a new pool (closed when tb ends) whose round trips c counts.
func CountingPool(tb testing.TB, c *Counter) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	cfg.ConnConfig.Tracer = c
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Querier is what Explain asks: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Explain returns the plan Postgres would run sql on with args, on db, as EXPLAIN prints it.
func Explain(tb testing.TB, db Querier, sql string, args ...any) string {
	tb.Helper()
	rows, err := db.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		tb.Fatalf("pgtest: EXPLAIN: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("pgtest: EXPLAIN: %v", err)
	}
	return strings.Join(lines, "\n") + "\n"
}

// NeverAnalyzed turns autovacuum off for table (schema-qualified and quoted), so that Postgres
// plans its statements without statistics however many rows the test writes, as on a new table
// before autovacuum's first visit, or on any table after pg_upgrade, which carries none over.
func NeverAnalyzed(tb testing.TB, table string) {
	tb.Helper()
	if _, err := Pool(tb).Exec(context.Background(), `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
}

// ExamplePool is Pool and Schema for a runnable example, which has no testing.TB: a new pool on
// URL() and schema dropped if an earlier run left it, with what drops schema and closes the
// pool. It panics if Postgres does not answer, which fails the example with the reason.
func ExamplePool(ctx context.Context, schema string) (*pgxpool.Pool, func()) {
	p, err := pgxpool.New(ctx, URL())
	if err == nil {
		_, err = p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	if err != nil {
		panic(fmt.Sprintf("pgtest: Postgres at %s (TEST_DATABASE_URL): %v", URL(), err))
	}
	return p, func() {
		_, _ = p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		p.Close()
	}
}
