package activitytest_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/inbox"
)

// A consumer that ships an order once per message, through its inbox: RequireConsumedOnce
// delivers each message again, at once, and with its commit crashed, and wants one shipment
// per message.
func ExampleRequireConsumedOnce() {
	t := &exampleTB{} // in a test: func TestShipperConsumesOnce(t *testing.T) {
	defer t.done()
	db, schema := activitytest.NewSchema(t) // tempotent's tables, and yours
	shipments := pgx.Identifier{schema, "shipments"}.Sanitize()
	if _, err := db.Exec(context.Background(), "CREATE TABLE "+shipments+" (message_id text)"); err != nil {
		panic(err)
	}
	cfg := inbox.Config{Consumer: "shipper", Schema: schema}
	activitytest.RequireConsumedOnce(t, activitytest.ConsumerCheck{
		DB: db, Inbox: cfg,
		Consumer: func(db *pgxpool.Pool) func(context.Context, inbox.Message) error {
			shipper, err := inbox.New(db, cfg)
			if err != nil {
				panic(err)
			}
			return func(ctx context.Context, m inbox.Message) error { // what your broker calls
				_, err := shipper.Process(ctx, m, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO "+shipments+" VALUES ($1)", m.ID)
					return err
				})
				return err
			}
		},
		Effects: func() int {
			var n int
			_ = db.QueryRow(context.Background(), "SELECT count(*) FROM "+shipments).Scan(&n)
			return n
		},
	})
	var n int
	_ = db.QueryRow(context.Background(), "SELECT count(*) FROM "+shipments).Scan(&n)
	fmt.Println(t.Failed(), n) // one shipment for each of the check's four messages
	// Output: false 4
}
