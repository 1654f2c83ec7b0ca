package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// exampleOutbox connects to TEST_DATABASE_URL (or the local default), creates tempotent's tables
// in a schema of its own (migrate.Up creates the outbox beside the receipts), and
// returns the schema's outbox, the pool, and a cleanup that drops the schema.
func exampleOutbox(ctx context.Context, schema string) (*outbox.Outbox, *pgxpool.Pool, func()) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	if err := migrate.Up(ctx, pool, schema); err != nil {
		panic(err)
	}
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	return out, pool, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// Put writes the message in the business transaction: an order that rolls back announces
// nothing, and a retried transaction puts its message once. A dispatcher then delivers what
// committed, with the message ID for the receiver to deduplicate on.
func ExampleOutbox_Put() {
	ctx := context.Background()
	out, pool, cleanup := exampleOutbox(ctx, "example_outbox_put")
	defer cleanup()
	_, _ = pool.Exec(ctx, "CREATE TABLE example_outbox_put.orders (id text PRIMARY KEY)")

	placeOrder := func(id string, fail error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO example_outbox_put.orders VALUES ($1) ON CONFLICT DO NOTHING", id); err != nil {
				return err
			}
			err := out.Put(ctx, tx, outbox.Message{
				ID:          "order.placed/" + id, // the same on every retry of this transaction
				Topic:       "order.placed",
				OrderingKey: id,
				Payload:     []byte(`{"order":"` + id + `"}`),
			})
			if err != nil {
				return err
			}
			return fail
		})
	}
	fmt.Println(placeOrder("order-1", errors.New("payment declined")))
	fmt.Println(placeOrder("order-2", nil))
	fmt.Println(placeOrder("order-2", nil)) // the same transaction, retried
	st, _ := out.Stats(ctx)
	fmt.Println("pending:", st.Pending)

	publisher := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		fmt.Printf("deliver %s %s %s, attempt %d\n", d.Topic, d.ID, d.Payload, d.Attempt)
		return nil // delivered; an error would retry it after a backoff
	})
	d, err := outbox.NewDispatcher(out, publisher, nil)
	if err != nil {
		panic(err)
	}
	for range 2 {
		n, err := d.DispatchOnce(ctx)
		fmt.Println("dispatched:", n, err)
	}
	// Output:
	// payment declined
	// <nil>
	// <nil>
	// pending: 1
	// deliver order.placed order.placed/order-2 {"order":"order-2"}, attempt 1
	// dispatched: 1 <nil>
	// dispatched: 0 <nil>
}
