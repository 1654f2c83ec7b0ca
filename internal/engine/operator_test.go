package engine_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain wires the activity package's operator methods into the engine's tests (see
// operatorForTests in operator_internal_test.go), and fails the test binary if a goroutine
// outlives the tests: attempts run on goroutines of their own, and completions are written by a
// goroutine that hands on to the next.
func TestMain(m *testing.M) {
	store := func(db *pgxpool.Pool, schema string) *activity.Store {
		s, err := activity.NewStore(db, &activity.Config{Schema: schema})
		if err != nil {
			panic(err) // a valid schema name and a pool: NewStore cannot refuse them
		}
		return s
	}
	engine.SetOperatorForTests(
		func(ctx context.Context, db *pgxpool.Pool, schema string, limit int) (int64, error) {
			return store(db, schema).Purge(ctx, limit)
		},
		func(ctx context.Context, db *pgxpool.Pool, schema string) (int64, error) {
			return store(db, schema).Unresolved(ctx)
		},
		func(ctx context.Context, db *pgxpool.Pool, schema string) error {
			return store(db, schema).Partition(ctx)
		},
	)
	leaktest.VerifyTestMain(m)
}
