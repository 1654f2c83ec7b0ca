package outbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/outbox"
)

// A receiver refused two messages for good, and the dispatcher parked them as dead. At 3 a.m.
// the operator lists what is stuck, has the receiver fixed, and requeues the dead messages of
// the topic with who and why, which the audit log keeps. (tempotent outbox list and tempotent
// outbox requeue --all-dead do the same from a shell.)
func ExampleOutbox_RequeueDead() {
	ctx := context.Background()
	out, pool, cleanup := exampleOutbox(ctx, "example_outbox_requeue")
	defer cleanup()
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, id := range []string{"order-1", "order-2"} {
			if err := out.Put(ctx, tx, outbox.Message{ID: "paid/" + id, Topic: "order.paid", Payload: []byte(id)}); err != nil {
				return err
			}
		}
		return nil
	})
	refusing := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		return outbox.Permanent(errors.New("HTTP 422: unknown field \"currency\""))
	})
	d, _ := outbox.NewDispatcher(out, refusing, nil)
	_, _ = d.DispatchOnce(ctx)

	page, _ := out.List(ctx, outbox.ListFilter{State: outbox.StateDead, Topic: "order.paid"})
	for _, m := range page.Messages {
		fmt.Printf("%s %s after %d attempt: %s\n", m.ID, m.State, m.Attempts, m.LastError)
	}

	err := out.RequeueMessage(ctx, "paid/order-1", outbox.Action{By: "oncall"})
	fmt.Println(errors.Is(err, outbox.ErrInvalidAction))

	n, _ := out.RequeueDead(ctx, outbox.ListFilter{Topic: "order.paid"},
		outbox.Action{By: "oncall@example.com", Reason: "INC-42: receiver accepts currency again"})
	fmt.Println("requeued", n)
	err = out.RequeueMessage(ctx, "paid/order-1", outbox.Action{By: "oncall@example.com", Reason: "again"})
	fmt.Println(errors.Is(err, outbox.ErrNotDead))

	var actor, action, target string
	_ = pool.QueryRow(ctx, `SELECT actor, action, target FROM example_outbox_requeue.audit ORDER BY id LIMIT 1`).
		Scan(&actor, &action, &target)
	fmt.Println(actor, action, target)
	// Output:
	// paid/order-1 dead after 1 attempt: HTTP 422: unknown field "currency"
	// paid/order-2 dead after 1 attempt: HTTP 422: unknown field "currency"
	// true
	// requeued 2
	// true
	// oncall@example.com outbox.requeue paid/order-1
}
