package engine

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetOperatorForTests gives the engine's tests the activity package's operator methods (see
// operatorForTests); operator_test.go calls it.
func SetOperatorForTests(
	purge func(ctx context.Context, db *pgxpool.Pool, schema string, limit int) (int64, error),
	unresolved func(ctx context.Context, db *pgxpool.Pool, schema string) (int64, error),
	partition func(ctx context.Context, db *pgxpool.Pool, schema string) error,
) {
	operatorForTests.purge, operatorForTests.unresolved, operatorForTests.partition = purge, unresolved, partition
}
