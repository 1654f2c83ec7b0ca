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
			Key:                    mustKey(keys.Explicit("default", "", "Charge", "order-123")),
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
	fmt.Println(err != nil && errors.As(err, new(*activity.MismatchError)))
	// Output:
	// true 1
	// true
}

// DoInNewTx commits a local mutation and its receipt together: the replay does not run it again.
func ExampleDoInNewTx() {
	ctx := context.Background()
	store, pool, cleanup := exampleStore(ctx, "example_dotx")
	defer cleanup()
	_, _ = pool.Exec(ctx, "CREATE TABLE example_dotx.stock (sku text PRIMARY KEY, units int); INSERT INTO example_dotx.stock VALUES ('sku-1', 10)")

	fp, _ := keys.FingerprintOf(map[string]any{"sku": "sku-1", "units": 3})
	call := activity.Call{Key: mustKey(keys.Explicit("default", "", "Reserve", "order-123")), Fingerprint: fp}
	reserve := func(ctx context.Context, tx pgx.Tx) (int, error) {
		var left int
		err := tx.QueryRow(ctx, "UPDATE example_dotx.stock SET units = units - 3 WHERE sku = 'sku-1' RETURNING units").Scan(&left)
		return left, err
	}
	for range 3 {
		left, err := activity.DoInNewTx(ctx, store, call, reserve)
		fmt.Println(left, err)
	}
	// Output:
	// 7 <nil>
	// 7 <nil>
	// 7 <nil>
}

// DoInTx writes the receipt in the caller's own transaction, beside the caller's other writes:
// an order and its stock reservation commit together, with the reservation's receipt. A rolled
// back transaction leaves no receipt, so its retry runs again; a committed one is replayed.
func ExampleDoInTx() {
	ctx := context.Background()
	store, pool, cleanup := exampleStore(ctx, "example_dointx")
	defer cleanup()
	_, _ = pool.Exec(ctx, `CREATE TABLE example_dointx.stock (sku text PRIMARY KEY, units int);
		CREATE TABLE example_dointx.orders (id text PRIMARY KEY);
		INSERT INTO example_dointx.stock VALUES ('sku-1', 10)`)

	fp, _ := keys.FingerprintOf(map[string]any{"sku": "sku-1", "units": 3})
	call := activity.Call{Key: mustKey(keys.Explicit("default", "", "Reserve", "order-123")), Fingerprint: fp}
	reserve := func(ctx context.Context, tx pgx.Tx) (int, error) {
		var left int
		err := tx.QueryRow(ctx, "UPDATE example_dointx.stock SET units = units - 3 WHERE sku = 'sku-1' RETURNING units").Scan(&left)
		return left, err
	}
	placeOrder := func(commit bool) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO example_dointx.orders VALUES ('order-123') ON CONFLICT DO NOTHING"); err != nil {
				return err
			}
			left, err := activity.DoInTx(ctx, store, tx, call, reserve)
			if err != nil {
				return err
			}
			fmt.Println("units left:", left)
			if !commit {
				return errors.New("the caller changed its mind")
			}
			return nil
		})
		fmt.Println("committed:", err == nil)
	}
	placeOrder(false) // rolled back: stock, order and receipt alike
	placeOrder(true)
	placeOrder(true) // the same intent again: replayed, stock untouched

	var units int
	_ = pool.QueryRow(ctx, "SELECT units FROM example_dointx.stock").Scan(&units)
	fmt.Println("stock:", units)
	// Output:
	// units left: 7
	// committed: false
	// units left: 7
	// committed: true
	// units left: 7
	// committed: true
	// stock: 7
}

func mustKey(k keys.Key, err error) keys.Key {
	if err != nil {
		panic(err)
	}
	return k
}
