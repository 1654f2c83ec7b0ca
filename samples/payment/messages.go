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
)

// Paths served by Edge.
const (
	PathWebhooks = "/webhooks/fakepay"
	PathEvents   = "/events/shipments"
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
// a consumer of the reservation messages that processes each once through an inbox.
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
	mux := http.NewServeMux()
	mux.Handle("POST "+PathWebhooks, intake)
	mux.Handle("POST "+PathEvents, notify(db, notifier))
	return mux, nil
}

// notify is the shipment notifier: it records a notice per reservation message, once, and notes
// each duplicate delivery it acknowledged without running.
func notify(db *pgxpool.Pool, ib *inbox.Inbox) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
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
		switch {
		case errors.Is(err, inbox.ErrInProgress):
			http.Error(w, err.Error(), http.StatusConflict) // the dispatcher retries
			return
		case errors.Is(err, inbox.ErrMismatch):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		failpoint.Hit(failpoint.AfterConsume)
		if !ran {
			_, _ = db.Exec(r.Context(), "INSERT INTO payment_sample.duplicates (message_id, order_id) VALUES ($1, $2)", id, n.OrderID)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// notice is the payload of the reservation messages.
type notice struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Units   int    `json:"units"`
}

// Publishers returns the sample's two publishers: webhook events go to the order's workflow as
// an update whose ID is the event's message ID (Temporal runs it once); reservation messages go
// to the shipment notifier at edgeURL, the message ID as Idempotency-Key.
func Publishers(c client.Client, edgeURL string) (events, reservations outbox.Publisher) {
	events = &outbox.TemporalPublisher{Client: c, Route: routeEvent}
	reservations = &outbox.HTTPPublisher{URL: strings.TrimSuffix(edgeURL, "/") + PathEvents}
	return events, reservations
}

// routeEvent sends a provider event to the workflow of the order it is about: the charge's
// description is the order ID, which is the workflow ID. Events that reach a workflow that has
// finished (a refund's confirmation, say) are not wanted any more.
func routeEvent(d outbox.Delivery) (outbox.TemporalTarget, error) {
	var ev struct {
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
