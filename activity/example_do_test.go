package activity_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// exampleStore connects to TEST_DATABASE_URL (or the local default) and migrates a store in a
// schema of its own, dropped by the returned cleanup.
func exampleStore(ctx context.Context, schema string) (*activity.Store, *pgxpool.Pool, func()) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	store, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	return store, pool, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// Do outside Temporal: the second call with the same key replays the first result, and the
// same key with another request is refused without calling anything.
func ExampleDo() {
	ctx := context.Background()
	store, _, cleanup := exampleStore(ctx, "example_do")
	defer cleanup()

	charge := func(amount int) activity.Call {
		fp, _ := keys.FingerprintOf(map[string]int{"amount": amount})
		return activity.Call{
			Key:                    keys.Key{Namespace: "default", Operation: "Charge", ID: "order-123/charge"},
			Fingerprint:            fp,
			DownstreamDeduplicates: true,
		}
	}
	calls := 0
	provider := func(ctx context.Context) (string, error) {
		calls++
		tok, _ := keys.TokenFrom(ctx) // send this as the Idempotency-Key
		return "ch_" + tok.String()[:6], nil
	}

	first, _ := activity.Do(ctx, store, charge(100), provider)
	again, _ := activity.Do(ctx, store, charge(100), provider)
	_, err := activity.Do(ctx, store, charge(999), provider)

	fmt.Println(first == again, calls)
	fmt.Println(err != nil && errors.Is(err, activity.ErrPayloadMismatch))
	// Output:
	// true 1
	// true
}

// DoTx commits a local mutation and its receipt together: the replay does not run it again.
func ExampleDoTx() {
	ctx := context.Background()
	store, pool, cleanup := exampleStore(ctx, "example_dotx")
	defer cleanup()
	_, _ = pool.Exec(ctx, "CREATE TABLE example_dotx.stock (sku text PRIMARY KEY, units int); INSERT INTO example_dotx.stock VALUES ('sku-1', 10)")

	fp, _ := keys.FingerprintOf(map[string]any{"sku": "sku-1", "units": 3})
	call := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Reserve", ID: "order-123/reserve"}, Fingerprint: fp}
	reserve := func(ctx context.Context, tx pgx.Tx) (int, error) {
		var left int
		err := tx.QueryRow(ctx, "UPDATE example_dotx.stock SET units = units - 3 WHERE sku = 'sku-1' RETURNING units").Scan(&left)
		return left, err
	}
	for range 3 {
		left, err := activity.DoTx(ctx, store, call, reserve)
		fmt.Println(left, err)
	}
	// Output:
	// 7 <nil>
	// 7 <nil>
	// 7 <nil>
}
