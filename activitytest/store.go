package activitytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/migrate"
)

// DatabaseURLDefault is the database NewStore uses when TEST_DATABASE_URL is empty.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/postgres"

// stores remembers the pool and schema of each store NewStore made, for the checks that need
// to move a receipt's lease (RequireRetrySafe) or read a receipt.
var stores sync.Map // *activity.Store → *testStore

type testStore struct {
	pool   *pgxpool.Pool
	schema string
}

// NewStore returns a store on the real Postgres at TEST_DATABASE_URL (DatabaseURLDefault when
// unset), in a schema of its own that is migrated now and dropped with everything in it when tb
// ends, so that tests never share receipts. cfg may be nil; its Schema is replaced. A database
// that does not answer fails tb — never skips it — with what to do.
func NewStore(tb testing.TB, cfg *activity.Config) *activity.Store {
	tb.Helper()
	ctx := context.Background()
	inheritedSchema, inWorker := inherited(tb, "store")
	pool, schema := connect(tb), newSchemaName()
	if inWorker {
		// A worker process (see process.go) works on the first process's schema, which
		// that process migrated and drops.
		schema = inheritedSchema
		tb.Cleanup(pool.Close)
	} else {
		remember(tb, "store", schema)
		tb.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			pool.Close()
		})
	}
	c := activity.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	s, err := activity.NewStore(pool, &c)
	if err != nil {
		tb.Fatalf("activitytest: %v", err)
	}
	if inWorker {
		// migrated by the first process
	} else if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("activitytest: migrate schema %s: %v", schema, err)
	}
	stores.Store(s, &testStore{pool: pool, schema: schema})
	tb.Cleanup(func() { stores.Delete(s) })
	return s
}

// testStoreOf returns what NewStore remembered of s, failing tb for a store it did not make.
func testStoreOf(tb testing.TB, s *activity.Store) *testStore {
	tb.Helper()
	ts, ok := stores.Load(s)
	if !ok {
		tb.Fatalf("activitytest: the store was not made by activitytest.NewStore (in this test); make it with NewStore so that the checks can reach its receipts")
	}
	return ts.(*testStore)
}

// connect returns a pool on the test database, failing tb with what to do when it does not
// answer.
func connect(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = DatabaseURLDefault
	}
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		tb.Fatalf("activitytest: Postgres at %s does not answer: %v. Start one (for example `docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres`) or set TEST_DATABASE_URL to one the tests may create schemas in", url, err)
	}
	return pool
}

func newSchemaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "activitytest_" + hex.EncodeToString(b[:])
}

// NewSchema returns a pool on the test database (as NewStore's) and a schema of its own with
// tempotent's migrations applied (migrate.Up: the receipts', outbox's and inbox's tables), which
// is dropped with everything in it when tb ends: the database of an inbox consumer under
// RequireConsumedOnce, where your own tables go too. The pool closes when tb ends.
func NewSchema(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema := connect(tb), newSchemaName()
	tb.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	if err := migrate.Up(context.Background(), pool, schema); err != nil {
		tb.Fatalf("activitytest: migrate schema %s: %v", schema, err)
	}
	return pool, schema
}
