package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/saga"
)

// TaskQueue is the sample's default task queue.
const TaskQueue = "tempotent-payments"

// Order is one purchase: charge the card, reserve stock, ship, confirm.
type Order struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Card     string `json:"card"` // "tok_visa"; "tok_chargeDeclined" declines
	SKU      string `json:"sku"`
	Units    int    `json:"units"`
	Address  string `json:"address"` // "nowhere" cannot be shipped to
	// Faults are fakepay fault specs (fakepay.ParseFaults) sent with this order's requests to
	// the payment provider and to the carrier, to show the demo's failure modes.
	ChargeFaults   string `json:"charge_faults,omitempty"`
	ShipmentFaults string `json:"shipment_faults,omitempty"`
	// Gateway chooses where the card is charged: "" at the payment provider (Charge),
	// GatewayLegacy at the gateway that does not deduplicate (LegacyCharge).
	Gateway string `json:"gateway,omitempty"`
}

// GatewayLegacy is Order.Gateway for the gateway that does not deduplicate.
const GatewayLegacy = "legacy"

// Result is how an order ended.
type Result struct {
	OrderID  string     `json:"order_id"`
	Status   string     `json:"status"` // StatusCompleted or StatusCompensated
	ChargeID string     `json:"charge_id,omitempty"`
	Reason   string     `json:"reason,omitempty"` // why it was compensated: "<error type>: <message>"
	Saga     saga.State `json:"saga"`
	// Events are the provider events the workflow received, by event ID; EventRepeats counts
	// deliveries of an event it had already received (Temporal's update IDs keep it at 0).
	Events       map[string]PaymentEvent `json:"events,omitempty"`
	EventRepeats int                     `json:"event_repeats,omitempty"`
}

// Order outcomes.
const (
	StatusCompleted   = "completed"
	StatusCompensated = "compensated"
)

// ConfirmTimeout is how long PaymentSaga waits for the provider's webhook that settles a charge
// answered "processing" (3-D Secure, a bank transfer) before it gives up on the order.
const ConfirmTimeout = 5 * time.Minute

// PaymentSaga charges the card, reserves the stock, creates the shipment and confirms the
// order. When a step fails for good — a declined card, an address the carrier refuses — the
// saga refunds, releases and cancels whatever may have happened, each once.
func PaymentSaga(ctx workflow.Context, o Order) (Result, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    200 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    3 * time.Second,
			MaximumAttempts:    20,
		},
	})
	s, err := saga.New(ctx, &saga.Options{CompensationOptions: workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second}})
	if err != nil {
		return Result{}, err
	}
	res := Result{OrderID: o.ID, Status: StatusCompleted, Events: map[string]PaymentEvent{}}
	// The provider's webhooks arrive as updates, at any time, more than once, in any order.
	if err := workflow.SetUpdateHandler(ctx, UpdatePaymentEvent, func(ctx workflow.Context, ev PaymentEvent) error {
		if _, seen := res.Events[ev.ID]; seen {
			res.EventRepeats++
			return nil
		}
		res.Events[ev.ID] = ev
		return nil
	}); err != nil {
		return Result{}, err
	}
	compensate := func(cause error) (Result, error) {
		res.Status, res.Reason = StatusCompensated, cause.Error()
		var appErr *temporal.ApplicationError
		if errors.As(cause, &appErr) {
			res.Reason = appErr.Type() + ": " + appErr.Message()
		}
		err := s.Compensate(ctx)
		res.Saga = s.State()
		return res, err
	}

	chargeAt := "Charge"
	if o.Gateway == GatewayLegacy {
		chargeAt = "LegacyCharge" // refunded the same way: Refund finds the charge by its token
	}
	var charge downstream.Charge
	if err := s.Step(ctx, "charge", saga.Compensation{Activity: "Refund", Args: []any{o}}, chargeAt, o).Get(ctx, &charge); err != nil {
		return compensate(err)
	}
	res.ChargeID = charge.ID
	if charge.Status == "processing" {
		if err := awaitSettled(ctx, &res, charge.ID); err != nil {
			return compensate(err)
		}
	}
	if err := s.Step(ctx, "reserve", saga.Compensation{Activity: "ReleaseInventory", Args: []any{o}}, "ReserveInventory", o).Get(ctx, nil); err != nil {
		return compensate(err)
	}
	if err := s.Step(ctx, "ship", saga.Compensation{Activity: "CancelShipment", Args: []any{o}}, "CreateShipment", o).Get(ctx, nil); err != nil {
		return compensate(err)
	}
	if err := workflow.ExecuteActivity(keys.WithStep(ctx, "confirm"), "ConfirmOrder", o).Get(ctx, nil); err != nil {
		return compensate(err)
	}
	s.Complete()
	res.Saga = s.State()
	return res, nil
}

// awaitSettled waits for the webhook that settles a charge the provider answered "processing".
func awaitSettled(ctx workflow.Context, res *Result, chargeID string) error {
	var settled *PaymentEvent
	found := func() bool {
		for _, ev := range res.Events {
			if ev.ChargeID == chargeID && (ev.Type == "charge.succeeded" || ev.Type == "charge.failed") {
				settled = &ev
				return true
			}
		}
		return false
	}
	ok, err := workflow.AwaitWithTimeout(ctx, ConfirmTimeout, found)
	switch {
	case err != nil:
		return err
	case !ok:
		return temporal.NewNonRetryableApplicationError("no confirmation of charge "+chargeID+" within "+ConfirmTimeout.String(), "ConfirmationTimeout", nil)
	case settled.Type == "charge.failed":
		return temporal.NewNonRetryableApplicationError("the provider failed charge "+chargeID+" after processing it", "ChargeFailed", nil)
	}
	return nil
}

// QuickCharge charges an order under its business key ("charge", "order/<id>", stored as
// "explicit:order/<id>"): whichever workflow charges the same order — a double-clicked
// checkout, a retried start — the provider is called for it once, and every caller gets the same charge. A key part that is malformed
// (say, a tenant with control bytes) fails the workflow with tempotent.InvalidKey before
// anything is called.
func QuickCharge(ctx workflow.Context, o Order) (downstream.Charge, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 3 * time.Second, MaximumAttempts: 20},
	})
	ctx = keys.WithID(keys.WithStep(ctx, "charge"), "order/"+o.ID)
	var ch downstream.Charge
	err := workflow.ExecuteActivity(ctx, "Charge", o).Get(ctx, &ch)
	return ch, err
}

// Schema is where the sample keeps its business tables.
const Schema = "payment_sample"

// Migrate creates the sample's tables and stocks its one product.
func Migrate(ctx context.Context, db *pgxpool.Pool) error {
	// One implicit transaction (the statements go as one simple query), serialised by an
	// advisory lock: CREATE ... IF NOT EXISTS races with itself when many workers start at once
	// on a new database.
	_, err := db.Exec(ctx, `
SELECT pg_advisory_xact_lock(hashtext('tempotent.payment_sample.migrate'));
CREATE SCHEMA IF NOT EXISTS payment_sample;
CREATE TABLE IF NOT EXISTS payment_sample.stock (
	sku   text PRIMARY KEY,
	units bigint NOT NULL CHECK (units >= 0));
CREATE TABLE IF NOT EXISTS payment_sample.orders (
	id         text PRIMARY KEY,
	status     text NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now());
-- What each order reserved, written in the same transaction as the stock change.
CREATE TABLE IF NOT EXISTS payment_sample.reservations (
	order_id    text PRIMARY KEY,
	units       bigint NOT NULL,
	released    boolean NOT NULL DEFAULT false,
	reserved_at timestamptz NOT NULL DEFAULT now());
-- The shipment notifier's own writes, one per reservation message it processed. No unique key
-- on purpose: the inbox is what keeps a message from being processed twice, and the demo counts
-- the rows to show it.
CREATE TABLE IF NOT EXISTS payment_sample.notifications (
	message_id   text NOT NULL,
	order_id     text NOT NULL,
	kind         text NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now());
-- Deliveries the notifier acknowledged without running, for the demo and the fault tests to count.
CREATE TABLE IF NOT EXISTS payment_sample.duplicates (
	message_id text NOT NULL,
	order_id   text NOT NULL,
	seen_at    timestamptz NOT NULL DEFAULT now());
-- The charge ledger's own writes: each charge's status, from the newest of the provider's
-- events about it (inbox.Newer), and the events it skipped as older than the status it held.
CREATE TABLE IF NOT EXISTS payment_sample.charges (
	order_id   text NOT NULL,
	charge_id  text NOT NULL,
	status     text NOT NULL,
	event_id   text NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (order_id, charge_id));
CREATE TABLE IF NOT EXISTS payment_sample.stale_events (
	event_id  text NOT NULL,
	charge_id text NOT NULL,
	order_id  text NOT NULL,
	status    text NOT NULL,
	seen_at   timestamptz NOT NULL DEFAULT now());
INSERT INTO payment_sample.stock VALUES ('widget', 1000000000) ON CONFLICT DO NOTHING;`)
	if err != nil {
		return fmt.Errorf("migrate the payment sample's tables: %w", err)
	}
	return nil
}

// reserve and release move stock, record the reservation and put its message in the outbox, in
// the receipt's transaction (activity.RegisterTx): the message is sent if and only if the stock
// moved. The message's ID comes from the receipt (outbox.Message.ID), so every attempt of one
// reservation puts the same message.
func (a *Activities) reserve(ctx context.Context, tx pgx.Tx, o Order) (int64, error) {
	// The reservation row is the business's own record that this order reserved: a late retry
	// after its receipt was purged (a reset months later) finds it and moves no stock again.
	tag, err := tx.Exec(ctx, "INSERT INTO payment_sample.reservations (order_id, units) VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING", o.ID, o.Units)
	if err != nil {
		return 0, err
	}
	var left int64
	if tag.RowsAffected() == 0 {
		err := tx.QueryRow(ctx, "SELECT units FROM payment_sample.stock WHERE sku = $1", o.SKU).Scan(&left)
		return left, err
	}
	err = tx.QueryRow(ctx, "UPDATE payment_sample.stock SET units = units - $2 WHERE sku = $1 RETURNING units", o.SKU, o.Units).Scan(&left)
	if err == pgx.ErrNoRows {
		return 0, temporal.NewNonRetryableApplicationError("unknown product "+o.SKU, "UnknownProduct", nil)
	}
	if err != nil {
		return 0, err
	}
	return left, a.announce(ctx, tx, TopicReserved, o)
}

func (a *Activities) release(ctx context.Context, tx pgx.Tx, o Order) (int64, error) {
	// Release only what this order reserved: a reservation that never committed left no row,
	// and releasing it would create stock.
	tag, err := tx.Exec(ctx, "UPDATE payment_sample.reservations SET released = true WHERE order_id = $1 AND NOT released", o.ID)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() == 0 {
		// Nothing to release, once the reservation can no longer commit: its last attempt may
		// still hold its transaction open.
		return 0, activity.ForwardSettled(ctx)
	}
	var left int64
	if err := tx.QueryRow(ctx, "UPDATE payment_sample.stock SET units = units + $2 WHERE sku = $1 RETURNING units", o.SKU, o.Units).Scan(&left); err != nil {
		return 0, err
	}
	return left, a.announce(ctx, tx, TopicReleased, o)
}

// announce puts the order's reservation message, ordered per order: a release is delivered
// after its reservation.
func (a *Activities) announce(ctx context.Context, tx pgx.Tx, topic string, o Order) error {
	body, err := json.Marshal(notice{OrderID: o.ID, SKU: o.SKU, Units: o.Units})
	if err != nil {
		return err
	}
	return a.Outbox.Put(ctx, tx, outbox.Message{Topic: topic, OrderingKey: o.ID, Payload: body,
		Headers: map[string]string{"Content-Type": "application/json"}})
}

func confirm(ctx context.Context, tx pgx.Tx, o Order) (string, error) {
	_, err := tx.Exec(ctx, `INSERT INTO payment_sample.orders (id, status) VALUES ($1, 'confirmed')
		ON CONFLICT (id) DO UPDATE SET status = 'confirmed', updated_at = now()`, o.ID)
	return "confirmed", err
}
