package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/samples/payment"
	"github.com/tempotent/tempotent/worker"
)

// webhookSecret is the run's webhook signing secret, shared by fakepay and the worker.
const webhookSecret = "whsec_tempotent_demo"

// settleTimeout bounds the wait, after the last saga, for the provider's webhook queue and the
// outbox to empty.
const settleTimeout = time.Minute

// countMessages waits for the run's messages to settle (the provider has nothing left to send,
// the outbox nothing left to deliver), then counts what happened to them, at the provider and in
// the database, and what the workflows received.
func (s *Summary) countMessages(ctx context.Context, env *worker.Env, paymentsURL string, orders []payment.Order,
	results map[string]payment.Result, started time.Time) error {
	fp := fakepay.NewClient(paymentsURL)
	var ledger fakepay.Ledger
	for deadline := time.Now().Add(settleTimeout); ; {
		var err error
		if ledger, err = fp.Ledger(ctx); err != nil {
			return fmt.Errorf("read the payment provider's ledger: %w", err)
		}
		st, err := env.Outbox.Stats(ctx)
		if err != nil {
			return err
		}
		if (ledger.Webhooks.Pending == 0 && st.Pending == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := &s.Messages
	for _, n := range ledger.Webhooks.EventsByType {
		m.WebhookEvents += n
	}
	m.WebhookDeliveries = ledger.Webhooks.Delivered

	schema := pgx.Identifier{env.Config.Receipts.Schema}.Sanitize()
	err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".inbox WHERE consumer = $1 AND processed_at >= $2",
		"webhook/"+payment.WebhookSource, started).Scan(&m.WebhooksStored)
	if err != nil {
		return fmt.Errorf("count stored webhooks: %w", err)
	}
	m.Lost += max(m.WebhookEvents-m.WebhooksStored, 0) // created, never stored

	for _, o := range orders {
		r := results[o.ID]
		m.EventsToWorkflows += len(r.Events)
		m.ProcessedTwice += r.EventRepeats
		if o.Card != "tok_async" && o.Card != "tok_asyncDeclined" {
			continue
		}
		settled := false
		for _, ev := range r.Events {
			if ev.ChargeID == r.ChargeID && (ev.Type == "charge.succeeded" || ev.Type == "charge.failed") {
				settled = true
			}
		}
		if settled {
			m.AsyncSettled++
		} else {
			m.Lost++
		}
	}

	// Only this run's orders: other runs and tests may share the database.
	ids := make([]string, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	err = env.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'delivered') FROM `+schema+`.outbox
		WHERE topic IN ($1, $2) AND convert_from(payload, 'UTF8')::jsonb ->> 'order_id' = ANY ($3)`,
		payment.TopicReserved, payment.TopicReleased, ids).Scan(&m.OutboxMessages, &m.OutboxDelivered)
	if err != nil {
		return fmt.Errorf("count outbox messages: %w", err)
	}
	var processed int
	err = env.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1), count(*) FROM (
			SELECT count(*) AS n FROM payment_sample.notifications WHERE order_id = ANY ($1) GROUP BY message_id) per_message`,
		ids).Scan(&m.ProcessedOnce, new(int), &processed)
	if err != nil {
		return fmt.Errorf("count notifications: %w", err)
	}
	m.ProcessedTwice += processed - m.ProcessedOnce
	m.Lost += max(m.OutboxMessages-processed, 0) // put, never processed
	if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM payment_sample.duplicates WHERE order_id = ANY ($1)", ids).Scan(&m.ConsumerDups); err != nil {
		return fmt.Errorf("count the consumers' duplicates: %w", err)
	}
	err = env.Pool.QueryRow(ctx, `SELECT count(*) FROM payment_sample.duplicates d JOIN `+schema+`.inbox i USING (message_id)
		WHERE i.consumer = $2 AND d.order_id = ANY ($1)`, ids, payment.Consumer).Scan(&m.NotifierDups)
	if err != nil {
		return fmt.Errorf("count the notifier's duplicates: %w", err)
	}
	return m.countLedger(ctx, env, ledger, ids)
}

// countLedger compares the charge ledger, kept from the provider's events in whatever order
// they came, with the provider's own ledger: each of the run's charges must have the status
// the provider gives it, refunded, succeeded or failed.
func (m *Messages) countLedger(ctx context.Context, env *worker.Env, provider fakepay.Ledger, ids []string) error {
	if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM payment_sample.stale_events WHERE order_id = ANY ($1)", ids).Scan(&m.StaleSkipped); err != nil {
		return fmt.Errorf("count the ledger's stale events: %w", err)
	}
	rows, err := env.Pool.Query(ctx, "SELECT charge_id, status FROM payment_sample.charges WHERE order_id = ANY ($1)", ids)
	if err != nil {
		return fmt.Errorf("read the charge ledger: %w", err)
	}
	kept := map[string]string{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			rows.Close()
			return err
		}
		kept[id] = status
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the charge ledger: %w", err)
	}
	m.ChargesKept = len(kept)
	ours := map[string]bool{}
	for _, id := range ids {
		ours[id] = true
	}
	for _, c := range provider.Charges {
		if !ours[c.Description] || c.Status == "processing" {
			continue // not this run's, or not settled: no event yet
		}
		want := c.Status
		if c.Refunded {
			want = "refunded"
		}
		if kept[c.ID] != want {
			m.ChargeStatusWrong++
		}
	}
	return nil
}
