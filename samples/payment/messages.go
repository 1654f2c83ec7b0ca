package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// The sample's messages: what the stock reservation announces, and the provider's webhooks.
const (
	TopicReserved = "order.reserved" // put by ReserveInventory, in its transaction
	TopicReleased = "order.released" // put by ReleaseInventory, in its transaction
	// WebhookSource names the payment provider's webhooks; they land on the outbox topic
	// "webhook.fakepay".
	WebhookSource = "fakepay"
	// UpdatePaymentEvent is the update through which PaymentSaga learns of a provider event.
	UpdatePaymentEvent = "payment-event"
	// Consumer is the shipment notifier's inbox name.
	Consumer = "shipment-notifier"
	// LedgerConsumer is the charge ledger's inbox name: it keeps each charge's status from the
	// provider's events, which arrive out of order.
	LedgerConsumer = "charge-ledger"
)

// Paths served by Edge.
const (
	PathWebhooks = "/webhooks/fakepay"
	PathEvents   = "/events/shipments"
	PathCharges  = "/events/charges"
)

// PaymentEvent is what a workflow learns from the provider's webhook about its charge.
type PaymentEvent struct {
	ID       string `json:"id"`   // the provider's event ID
	Type     string `json:"type"` // "charge.succeeded", "charge.failed", "charge.refunded"
	ChargeID string `json:"charge_id"`
	Status   string `json:"status"`
}

// Edge is the sample's HTTP side, served by the worker process: the payment provider's webhooks
// (verified, deduplicated and put in the outbox by webhook.Handler) and the shipment notifier,
// a consumer of the reservation messages that processes each once through an inbox, and the
// charge ledger, a consumer of the provider's events that applies each only if it is newer.
func Edge(db *pgxpool.Pool, out *outbox.Outbox, webhookSecret string) (http.Handler, error) {
	intake, err := webhook.NewHandler(db, out, webhook.HandlerConfig{
		Source:   WebhookSource,
		Verifier: webhook.Stripe{Secrets: []string{webhookSecret}},
	})
	if err != nil {
		return nil, err
	}
	notifier, err := inbox.New(db, inbox.Config{Consumer: Consumer, Schema: out.Schema()})
	if err != nil {
		return nil, err
	}
	ledger, err := inbox.New(db, inbox.Config{Consumer: LedgerConsumer, Schema: out.Schema()})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+PathWebhooks, intake)
	mux.Handle("POST "+PathEvents, notify(db, notifier))
	mux.Handle("POST "+PathCharges, keepLedger(db, ledger))
	return mux, nil
}

// notify is the shipment notifier: it records a notice per reservation message, once, and notes
// each duplicate delivery it acknowledged without running.
func notify(db *pgxpool.Pool, ib *inbox.Inbox) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r, 64<<10)
		if !ok {
			return
		}
		var n notice
		if err := json.Unmarshal(body, &n); err != nil || n.OrderID == "" {
			http.Error(w, "not a reservation message", http.StatusBadRequest)
			return
		}
		id := r.Header.Get("Idempotency-Key")
		ran, err := ib.Process(r.Context(), inbox.Message{ID: id, Payload: body}, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO payment_sample.notifications (message_id, order_id, kind) VALUES ($1, $2, $3)",
				id, n.OrderID, r.Header.Get(outbox.HeaderTopic))
			return err
		})
		if refuse(w, err) {
			return
		}
		failpoint.Hit(failpoint.AfterConsume)
		answer(w, db, r, ran, id, n.OrderID)
	})
}

// readBody reads a delivery's body, up to limit bytes, or answers 400 and reports false.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// refuse answers a consumer's error, if any, with a status that the dispatcher retries (409,
// 503) or not (422), and reports whether it did.
func refuse(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, inbox.ErrInProgress):
		http.Error(w, err.Error(), http.StatusConflict) // the dispatcher retries
	case errors.Is(err, inbox.ErrMismatch):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
	return true
}

// answer acknowledges a delivery that a consumer's inbox processed, or found processed before:
// those it acknowledged without running are noted, for the demo and the fault tests to count.
func answer(w http.ResponseWriter, db *pgxpool.Pool, r *http.Request, ran bool, id, orderID string) {
	if !ran {
		_, _ = db.Exec(r.Context(), "INSERT INTO payment_sample.duplicates (message_id, order_id) VALUES ($1, $2)", id, orderID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// notice is the payload of the reservation messages.
type notice struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Units   int    `json:"units"`
}

// Publishers returns the sample's two publishers. Webhook events go to the charge ledger at
// edgeURL and then to the order's workflow as an update whose ID is the event's message ID
// (Temporal runs it once): a delivery that reached the ledger and failed at the workflow is
// delivered to both again, and the ledger's inbox absorbs it. Reservation messages go to the
// shipment notifier at edgeURL, the message ID as Idempotency-Key, which the notifier
// deduplicates on (the ledger, on the provider's event ID).
func Publishers(c client.Client, edgeURL string) (events, reservations outbox.Publisher) {
	ledger := &outbox.HTTPPublisher{URL: strings.TrimSuffix(edgeURL, "/") + PathCharges}
	workflows := &outbox.TemporalPublisher{Client: c, Route: routeEvent}
	events = outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		if err := ledger.Publish(ctx, d); err != nil {
			return fmt.Errorf("charge ledger: %w", err)
		}
		return workflows.Publish(ctx, d)
	})
	reservations = &outbox.HTTPPublisher{URL: strings.TrimSuffix(edgeURL, "/") + PathEvents}
	return events, reservations
}

// providerEvent is what the sample reads of the provider's webhook events (Stripe-shaped): the
// charge's description is its order's ID.
type providerEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Object struct {
			ID          string `json:"id"`
			Status      string `json:"status"`
			Description string `json:"description"`
		} `json:"object"`
	} `json:"data"`
}

// routeEvent sends a provider event to the workflow of the order it is about: the charge's
// description is the order ID, which is the workflow ID. Events that reach a workflow that has
// finished (a refund's confirmation, say) are not wanted any more.
func routeEvent(d outbox.Delivery) (outbox.TemporalTarget, error) {
	var ev providerEvent
	if err := json.Unmarshal(d.Payload, &ev); err != nil {
		return nil, fmt.Errorf("not a provider event: %w", err)
	}
	if ev.Data.Object.Description == "" {
		return nil, fmt.Errorf("event %s names no order", ev.ID)
	}
	return outbox.UpdateWorkflow{
		WorkflowID: ev.Data.Object.Description,
		UpdateName: UpdatePaymentEvent,
		Args:       []any{PaymentEvent{ID: ev.ID, Type: ev.Type, ChargeID: ev.Data.Object.ID, Status: ev.Data.Object.Status}},
		SkipClosed: true,
	}, nil
}
