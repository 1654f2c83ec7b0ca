package payment

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/inbox"
)

// chargeRank is the version of a charge's status for the ledger: a charge's states only move
// forward (succeeded or failed, then refunded), so the rank orders its events where the
// provider's created time, in whole seconds, cannot tell a success from the refund that
// followed it within the second.
var chargeRank = map[string]int64{"charge.succeeded": 1, "charge.failed": 1, "charge.refunded": 2}

// keepLedger is the charge ledger: it keeps each charge's status from the provider's events,
// once per event through its inbox, and only from an event newer than the status it holds
// (inbox.Inbox.Newer): the provider's events arrive out of order, and a late charge.succeeded must
// not turn a refunded charge back into a succeeded one. The events it skips as older are noted
// in payment_sample.stale_events.
func keepLedger(db *pgxpool.Pool, ib *inbox.Inbox) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r, 1<<20)
		if !ok {
			return
		}
		var ev providerEvent
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" || ev.Data.Object.ID == "" {
			http.Error(w, "not a charge event", http.StatusBadRequest)
			return
		}
		version, known := chargeRank[ev.Type]
		if !known {
			w.WriteHeader(http.StatusNoContent) // not about a charge's status
			return
		}
		// The inbox deduplicates on the provider's event ID, as a webhook consumer does: every
		// delivery of one event carries it, whichever way it came.
		id, charge, order := ev.ID, ev.Data.Object.ID, ev.Data.Object.Description
		status := ev.Type[len("charge."):]
		// The object is the charge, named with its order: fakepay numbers its charges from 1 in
		// each instance (Stripe's IDs are unique), and the demo's runs share the tables.
		object := order + "/" + charge
		ran, err := ib.Process(r.Context(), inbox.Message{ID: id, Payload: body}, func(ctx context.Context, tx pgx.Tx) error {
			newer, err := ib.Newer(ctx, tx, object, version)
			if err != nil {
				return err
			}
			if !newer {
				_, err := tx.Exec(ctx, "INSERT INTO payment_sample.stale_events (event_id, charge_id, order_id, status) VALUES ($1, $2, $3, $4)",
					ev.ID, charge, order, status)
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO payment_sample.charges (charge_id, order_id, status, event_id) VALUES ($1, $2, $3, $4)
				ON CONFLICT (order_id, charge_id) DO UPDATE SET status = excluded.status, event_id = excluded.event_id, updated_at = now()`,
				charge, order, status, ev.ID)
			return err
		})
		if refuse(w, err) {
			return
		}
		answer(w, db, r, ran, id, order)
	})
}
