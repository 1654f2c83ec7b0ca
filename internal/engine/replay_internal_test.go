package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// sent is one round trip a statementTracer saw: a lone statement, or a batch and its statements.
type sent struct {
	batch bool
	sql   []string
}

// statementTracer records every round trip its pool sends.
type statementTracer struct {
	mu   sync.Mutex
	sent []sent
}

func (t *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, sent{sql: []string{d.SQL}})
	return ctx
}

func (t *statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := sent{batch: true}
	for _, q := range d.Batch.QueuedQueries {
		s.sql = append(s.sql, q.SQL)
	}
	t.sent = append(t.sent, s)
	return ctx
}

func (t *statementTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *statementTracer) take() []sent {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sent
	t.sent = nil
	return s
}

// tracedStore is a migrated store in a fresh schema on a pool of its own, whose round trips tr
// records.
func tracedStore(t *testing.T, tr *statementTracer, cfg Config) *Store {
	t.Helper()
	pc, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.Schema = pgtest.Schema(t)
	s, err := NewStore(pool, &cfg)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

func storedResult(context.Context) (*commonpb.Payload, error) {
	return &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"ch_1"`)}, nil
}

// TestRetryReplaysWithTheLoneLookup: a retry of a finished intent sends one statement, the plain
// lookup, on its own: not in a batch (pgx sends a batch in pipeline mode, which costs more), and
// with nothing in front of it (no settings statement).
func TestRetryReplaysWithTheLoneLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := new(statementTracer)
	s := tracedStore(t, tr, Config{})
	c := reserveCall(t, "lone-lookup", true)
	want, err := s.Do(ctx, c, storedResult)
	require.NoError(t, err)
	tr.take()

	c.Attempt = 2
	got, err := s.Do(ctx, c, func(context.Context) (*commonpb.Payload, error) {
		t.Fatal("a replay called the function")
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, want.Data, got.Data)
	require.Equal(t, []sent{{sql: []string{s.sql.read}}}, tr.take(),
		"a retry's replay must send the plain lookup alone, outside a batch")
}

// TestRetryLookupGivesUpBehindATableLock: the plain lookup goes without the settings and their
// statement_timeout, so its own deadline (statementContext) is what bounds it behind a table
// that DDL holds: the retry fails with a store error instead of waiting as long as its caller's
// context (here, for ever).
func TestRetryLookupGivesUpBehindATableLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := tracedStore(t, new(statementTracer), Config{LockTimeout: 100 * time.Millisecond, StatementTimeout: 200 * time.Millisecond})
	c := reserveCall(t, "table-lock", true)
	_, err := s.Do(ctx, c, storedResult)
	require.NoError(t, err)

	ddl, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ddl.Rollback(context.Background()) })
	_, err = ddl.Exec(ctx, "LOCK TABLE "+s.table()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	c.Attempt = 2
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, c, storedResult)
		done <- err
	}()
	select {
	case err := <-done:
		var se *StoreError
		require.ErrorAs(t, err, &se, "a retry read through a table held by DDL")
	case <-time.After(30 * time.Second):
		require.NoError(t, ddl.Rollback(ctx)) // let it end, so that the leak check does not hang
		<-done
		t.Fatal("a retry's lookup waited for the table lock past the statement timeout")
	}
}

// TestRetryReplayAllocations bounds the Go a retry's replay costs, counted, not timed: the lone
// lookup (a batch of one cost 18 allocations more) and the row scanned into one value (pointers
// per nullable column cost 15 more). 39–41 at the time of writing, pgx's own included (TLS or
// not, -race or not), where it was 55 before; the bound leaves room for pgx, not for either.
func TestRetryReplayAllocations(t *testing.T) {
	ctx := context.Background()
	s := reserveStore(t, Config{})
	c := reserveCall(t, "allocations", true)
	want, err := s.Do(ctx, c, storedResult)
	require.NoError(t, err)
	c.Attempt = 2
	allocs := testing.AllocsPerRun(200, func() {
		got, err := s.Do(ctx, c, nil)
		require.NoError(t, err)
		require.Equal(t, want.Data, got.Data)
	})
	require.LessOrEqual(t, allocs, 45.0, "allocations per replay on a retry")
}

// TestFirstExecutionCompletesAlone: a first execution's two round trips are the reservation
// behind its settings, then the completion alone, outside a batch (it skips locked rows and runs
// under writeContext's deadline, so it needs no settings).
func TestFirstExecutionCompletesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := new(statementTracer)
	s := tracedStore(t, tr, Config{})
	tr.take() // the migration's
	_, err := s.Do(ctx, reserveCall(t, "completes-alone", true), storedResult)
	require.NoError(t, err)
	require.Equal(t, []sent{
		{batch: true, sql: []string{s.sql.settingsAsync, s.sql.reserve}},
		{sql: []string{s.sql.completeSkipLocked}},
	}, tr.take())
}
