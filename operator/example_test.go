package operator_test

import (
	"context"
	"fmt"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// exampleSetup returns a migrated store on a fresh schema, as the workers have it, an operator
// client on its receipts, and what drops the schema afterwards.
func exampleSetup(ctx context.Context, schema string) (*activity.Store, *operator.Client, func()) {
	pool, cleanup := pgtest.ExamplePool(ctx, schema)
	store, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	if err == nil {
		err = store.Migrate(ctx)
	}
	op, opErr := operator.NewClient(pool, operator.Config{Schema: schema})
	if err != nil || opErr != nil {
		cleanup()
		panic(fmt.Sprint(err, opErr))
	}
	return store, op, cleanup
}

func mustKey(k keys.Key, err error) keys.Key {
	if err != nil {
		panic(err)
	}
	return k
}
