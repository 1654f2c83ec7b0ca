package inbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// A charge's events arrive out of order: the refund first, then the success that came before
// it. Each runs once through the inbox, and Newer keeps the older one from undoing the newer:
// the charge's status ends "refunded". The version is the state's rank, as a charge's states
// only move forward.
func ExampleInbox_Newer() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool(ctx, "example_newer")
	defer cleanup()
	if err := migrate.Up(ctx, pool, "example_newer"); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE example_newer.charges (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		panic(err)
	}
	ledger, err := inbox.New(pool, inbox.Config{Consumer: "charge-ledger", Schema: "example_newer"})
	if err != nil {
		panic(err)
	}
	rank := map[string]int64{"succeeded": 1, "refunded": 2}

	for _, ev := range []struct{ id, charge, status string }{
		{"evt_2", "ch_1", "refunded"},
		{"evt_1", "ch_1", "succeeded"}, // older, arrives last
		{"evt_2", "ch_1", "refunded"},  // a redelivery
	} {
		var applied bool
		ran, err := ledger.Process(ctx, inbox.Message{ID: ev.id}, func(ctx context.Context, tx pgx.Tx) error {
			newer, err := ledger.Newer(ctx, tx, ev.charge, rank[ev.status])
			if err != nil || !newer {
				return err
			}
			applied = true
			_, err = tx.Exec(ctx, `INSERT INTO example_newer.charges VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET status = excluded.status`, ev.charge, ev.status)
			return err
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s %s: ran %v, applied %v\n", ev.id, ev.status, ran, applied)
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM example_newer.charges WHERE id = 'ch_1'").Scan(&status); err != nil {
		panic(err)
	}
	fmt.Println("ch_1:", status)
	// Output:
	// evt_2 refunded: ran true, applied true
	// evt_1 succeeded: ran true, applied false
	// evt_2 refunded: ran false, applied false
	// ch_1: refunded
}
