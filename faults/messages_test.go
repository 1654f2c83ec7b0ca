//go:build unix

package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/samples/payment"
	"github.com/tempotent/tempotent/webhook"
)

// The sample worker's messages: the reservation's outbox message goes to the shipment notifier
// (an inbox consumer served by the worker itself); the payment provider's webhooks come in
// through the worker's intake and reach the order's workflow as updates.

const webhookSecret = "whsec_faults"

// shortLease lets a second worker take over a killed dispatcher's claims within seconds.
const shortLease = "TEMPOTENT_OUTBOX_LEASE=2s"

// notifierDuplicates counts the deliveries of the order's messages that the shipment notifier
// acknowledged without running.
func (w *world) notifierDuplicates(orderID string) int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.db().QueryRow(context.Background(), "SELECT count(*) FROM payment_sample.duplicates WHERE order_id = $1", orderID).Scan(&n))
	return n
}

// reservationMessage waits until the order's reservation message is delivered and returns its
// ID and attempts.
func (w *world) reservationMessage(orderID string) (id string, attempts int) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		err := w.db().QueryRow(context.Background(), `SELECT id, attempts FROM `+w.schema+`.outbox
			WHERE topic = $1 AND state = 'delivered' AND convert_from(payload, 'UTF8')::jsonb ->> 'order_id' = $2`,
			payment.TopicReserved, orderID).Scan(&id, &attempts)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "the reservation message of %s was not delivered", orderID)
	return id, attempts
}

func (w *world) notifications(messageID string) int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.db().QueryRow(context.Background(), "SELECT count(*) FROM payment_sample.notifications WHERE message_id = $1", messageID).Scan(&n))
	return n
}

// Rows 25 and 26: the process that delivers or consumes a reservation message dies between the
// consumer's commit and the dispatcher's mark. The next worker delivers the message again after
// the lease, and the consumer's inbox acknowledges it without running: one notification.
func TestRow25And26KilledBetweenConsumeAndMark(t *testing.T) {
	for _, tc := range []struct {
		row, point string
	}{
		{"row 25: dispatcher killed after publishing, before marking", failpoint.AfterPublish},
		{"row 26: consumer killed after committing, before answering", failpoint.AfterConsume},
	} {
		t.Run(tc.point, func(t *testing.T) {
			w := newWorld(t, worldOptions{})
			first := w.startWorker(failpoint.EnvVar+"="+tc.point+"=kill", shortLease)
			o := w.order("o")
			run := w.saga(o)
			first.waitFor("failpoint "+tc.point+" reached", time.Minute)

			w.startWorker(shortLease)
			require.Equal(t, payment.StatusCompleted, w.result(run).Status)
			id, attempts := w.reservationMessage(o.ID)
			require.Equal(t, 1, w.notifications(id), "%s: the message was processed %d times", tc.row, w.notifications(id))
			require.Equal(t, 2, attempts, "%s: the message was not delivered a second time, so the test proved nothing", tc.row)
			require.Equal(t, 1, w.notifierDuplicates(o.ID), "%s: the redelivery was not acknowledged as a duplicate", tc.row)
		})
	}
}

// Rows 23 and 24: the provider's webhooks, through the worker's intake. A delivery replayed
// (concurrently, and again as if a day later) is answered 2xx and stored once; the outbox
// message delivered to the workflow a second time is absorbed by Temporal's update ID; the
// workflow sees the event once. Forged, stale and oversized deliveries are refused with nothing
// stored.
func TestRow23And24Webhooks(t *testing.T) {
	w := newWorld(t, worldOptions{})
	port, err := freeport.Get()
	require.NoError(t, err)
	edge := fmt.Sprintf("127.0.0.1:%d", port)
	provider := startFakepay(t, t.TempDir()+"/webhooks", "-webhook-url", "http://"+edge+payment.PathWebhooks, "-webhook-secret", webhookSecret)
	w.startWorker("FAKEPAY_URL="+provider.URL, "TEMPOTENT_HTTP_ADDR="+edge, "FAKEPAY_WEBHOOK_SECRET="+webhookSecret, shortLease)

	// The charge is confirmed by webhook; the carrier then holds the shipment for seconds, so
	// that the workflow is still running while the event is replayed.
	o := w.order("async")
	o.Card, o.ShipmentFaults = "tok_async", "slow=6s"
	run := w.saga(o)

	var eventID, messageID string
	require.Eventually(t, func() bool {
		err := w.db().QueryRow(context.Background(), `SELECT headers ->> $1, id FROM `+w.schema+`.outbox
			WHERE topic = $2 AND state = 'delivered' AND headers ->> $3 = 'charge.succeeded'
			  AND convert_from(payload, 'UTF8')::jsonb #>> '{data,object,description}' = $4`,
			webhook.HeaderID, "webhook."+payment.WebhookSource, webhook.HeaderEventType, o.ID).Scan(&eventID, &messageID)
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the confirmation did not reach the workflow")

	fp := fakepay.NewClient(provider.URL)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { _ = fp.ReplayWebhook(context.Background(), eventID) })
	}
	wg.Wait()
	// A day later: the intake's record of the delivery is a day old (well within its retention).
	_, err = w.db().Exec(context.Background(), "UPDATE "+w.schema+".inbox SET processed_at = processed_at - interval '1 day' WHERE message_id = $1", messageID)
	require.NoError(t, err)
	require.NoError(t, fp.ReplayWebhook(context.Background(), eventID))
	// And the outbox delivers the stored event to the workflow once more, as after a dispatcher
	// died before marking it (row 25's shape): Temporal's update ID absorbs it.
	_, err = w.db().Exec(context.Background(), "UPDATE "+w.schema+".outbox SET state = 'pending', lease_until = NULL WHERE id = $1", messageID)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		l, err := fp.Ledger(context.Background())
		return err == nil && l.Webhooks.DeliveredByEvent[eventID] >= 7 && l.Webhooks.Pending == 0
	}, time.Minute, 50*time.Millisecond, "the replays were not all answered 2xx")
	var stored int
	require.NoError(t, w.db().QueryRow(context.Background(), `SELECT count(*) FROM `+w.schema+`.inbox WHERE message_id = $1`, messageID).Scan(&stored))
	require.Equal(t, 1, stored, "a replayed delivery was stored again")
	require.Eventually(t, func() bool {
		var state string
		var attempts int
		err := w.db().QueryRow(context.Background(), `SELECT state, attempts FROM `+w.schema+`.outbox WHERE id = $1`, messageID).Scan(&state, &attempts)
		return err == nil && state == "delivered" && attempts == 2
	}, time.Minute, 50*time.Millisecond, "the stored event was not delivered to the workflow a second time, so Temporal's deduplication went untested")
	d, err := w.temporal.client.DescribeWorkflow(context.Background(), run.GetID(), run.GetRunID())
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.Status,
		"the workflow finished before the event was delivered again (the machine is slow?): the redelivery went to no one and proved nothing")

	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	require.Contains(t, r.Events, eventID)
	require.Zero(t, r.EventRepeats, "the workflow received the event more than once")

	// Row 24: refused with 4xx, nothing stored.
	count := func() (n int) {
		require.NoError(t, w.db().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+w.schema+`.inbox) + (SELECT count(*) FROM `+w.schema+`.outbox)`).Scan(&n))
		return n
	}
	before := count()
	body := []byte(`{"id":"evt_forged","object":"event","type":"charge.succeeded","data":{"object":{"id":"ch_x","description":"` + o.ID + `"}}}`)
	for name, tc := range map[string]struct {
		body   []byte
		header string
		want   int
	}{
		"forged": {body, webhook.SignStripe("whsec_not_the_secret", time.Now(), body), http.StatusUnauthorized},
		"stale":  {body, webhook.SignStripe(webhookSecret, time.Now().Add(-time.Hour), body), http.StatusBadRequest},
		"oversized": {bytes.Repeat([]byte("x"), webhook.MaxBodyBytesDefault+1),
			webhook.SignStripe(webhookSecret, time.Now(), bytes.Repeat([]byte("x"), webhook.MaxBodyBytesDefault+1)), http.StatusRequestEntityTooLarge},
		"malformed": {[]byte("not json"), webhook.SignStripe(webhookSecret, time.Now(), []byte("not json")), http.StatusBadRequest},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://"+edge+payment.PathWebhooks, bytes.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Stripe-Signature", tc.header)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, name)
		_ = resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, name)
	}
	require.Equal(t, before, count(), "a refused delivery stored something, so the dispatcher would hand it on")
}

// webhookFront forwards the provider's webhooks to whichever worker's intake answers first, as a
// load balancer in front of several workers would: a worker that is dead or paused does not
// keep the provider's deliveries from landing.
func webhookFront(t *testing.T, edges []string) string {
	client := &http.Client{Timeout: 3 * time.Second}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		for _, edge := range edges {
			req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+edge+r.URL.Path, bytes.NewReader(body))
			if err != nil {
				continue
			}
			req.Header = r.Header.Clone()
			resp, err := client.Do(req)
			if err != nil {
				continue
			}
			answer, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			rw.WriteHeader(resp.StatusCode)
			_, _ = rw.Write(answer)
			return
		}
		http.Error(rw, "no worker's intake answered", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// messageCounts counts, once the provider has nothing left to send and the outbox nothing left
// to deliver (or a minute has passed), the events that reached a workflow or the notifier twice,
// and those that never did: an async charge whose workflow got no confirmation, a reservation
// message never delivered or never processed.
func (w *world) messageCounts(provider string, orders []payment.Order, results []payment.Result) (twice, lost int) {
	w.t.Helper()
	ctx := context.Background()
	fp := fakepay.NewClient(provider)
	require.Eventually(w.t, func() bool {
		l, err := fp.Ledger(ctx)
		if err != nil || l.Webhooks.Pending > 0 {
			return false
		}
		var pending int
		err = w.db().QueryRow(ctx, "SELECT count(*) FROM "+w.schema+".outbox WHERE state = 'pending'").Scan(&pending)
		return err == nil && pending == 0
	}, 2*time.Minute, 200*time.Millisecond, "the webhooks and the outbox did not drain")
	for i, o := range orders {
		r := results[i]
		twice += r.EventRepeats
		if o.Card != "tok_async" {
			continue
		}
		settled := false
		for _, ev := range r.Events {
			settled = settled || (ev.ChargeID == r.ChargeID && ev.Type == "charge.succeeded")
		}
		if !settled {
			lost++
			w.t.Logf("order %s (%s): its workflow never got the confirmation of charge %s; events: %v", o.ID, r.Status, r.ChargeID, r.Events)
		}
	}
	var undelivered, unprocessed, processedTwice int
	require.NoError(w.t, w.db().QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE o.state <> 'delivered'),
			count(*) FILTER (WHERE o.state = 'delivered' AND n.count IS NULL),
			count(*) FILTER (WHERE n.count > 1)
		FROM `+w.schema+`.outbox o
		LEFT JOIN (SELECT message_id, count(*) FROM payment_sample.notifications GROUP BY message_id) n ON n.message_id = o.id
		WHERE o.topic IN ($1, $2) AND convert_from(o.payload, 'UTF8')::jsonb ->> 'order_id' LIKE $3`,
		payment.TopicReserved, payment.TopicReleased, w.queue+"-%").Scan(&undelivered, &unprocessed, &processedTwice))
	if undelivered+unprocessed+processedTwice > 0 {
		w.t.Logf("reservation messages: %d not delivered, %d delivered and never processed, %d processed more than once", undelivered, unprocessed, processedTwice)
	}
	return twice + processedTwice, lost + undelivered + unprocessed
}
