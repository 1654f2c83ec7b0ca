package webhook_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/webhook"
)

// stripeRedelivery is a Stripe event as Stripe renders it for a delivery, pretty-printed, with
// pending_webhooks and request: what a redelivery of the same event may change.
func stripeRedelivery(amount, pending int, request string) []byte {
	return fmt.Appendf(nil, `{
  "id": "evt_1",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1700000000,
  "data": {"object": {"id": "pi_1", "object": "payment_intent", "amount": %d}},
  "livemode": false,
  "pending_webhooks": %d,
  "request": {"id": %q, "idempotency_key": null},
  "type": "payment_intent.succeeded"
}`, amount, pending, request)
}

// Stripe counts down pending_webhooks as the account's other endpoints answer, so a redelivery of
// one event may carry another value, and its request describes the API call behind the event,
// not the event (https://docs.stripe.com/api/events/object). Such a redelivery is a duplicate:
// 200, nothing stored again, the first body kept. One whose data differs is not a redelivery
// Stripe makes (an event's data never changes): 409. For Standard Webhooks and GitHub, whose
// bodies are the provider's own, every byte counts.
func TestHandlerStripeRedeliveryDifferingInMetadata(t *testing.T) {
	t.Parallel()
	first := stripeRedelivery(5, 2, "req_1")
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			k := newHook(t, webhook.HandlerConfig{Verifier: sc.verifier(sc.secret)})
			post := func(body []byte) *httptest.ResponseRecorder {
				return k.post("/", sc.sign(t, sc.secret, "evt_1", now, body), body)
			}
			requireOK(t, post(first), false)
			stored := k.messages(t)

			for name, body := range map[string][]byte{
				"PendingWebhooks": stripeRedelivery(5, 1, "req_1"),
				"Request":         stripeRedelivery(5, 2, "req_2"),
				"Both":            stripeRedelivery(5, 0, "req_3"),
				"Compacted":       []byte(strings.Join(strings.Fields(string(stripeRedelivery(5, 1, "req_1"))), "")),
			} {
				w := post(body)
				if sc.name == "Stripe" {
					requireOK(t, w, true)
				} else {
					requireStatus(t, w, http.StatusConflict)
				}
				require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t), name)
			}
			requireStatus(t, post(stripeRedelivery(6, 2, "req_1")), http.StatusConflict)
			requireStatus(t, post(stripeRedelivery(6, 1, "req_2")), http.StatusConflict)
			require.Equal(t, stored, k.messages(t), "the first body is what was handed on")
		})
	}
}

// An inbox record written before Delivery.Content existed holds the digest of the whole body:
// after an upgrade, a Stripe redelivery of that body, byte for byte, is still a duplicate, not
// a conflict. (One that differs in metadata from such a record is a conflict, as before the
// upgrade: the record has no other digest to compare with.)
func TestHandlerStripeRedeliveryOfARecordFromBeforeContent(t *testing.T) {
	t.Parallel()
	k := newHook(t, webhook.HandlerConfig{})
	first := stripeRedelivery(5, 2, "req_1")
	sum := sha256.Sum256(first)
	k.exec(t, `INSERT INTO {{schema}}.inbox (consumer, message_id, digest) VALUES ('webhook/stripe', '`+
		webhook.MessageID("stripe", "", "evt_1")+`', '\x`+hex.EncodeToString(sum[:])+`')`)

	post := func(body []byte) *httptest.ResponseRecorder {
		return k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, now, body)), body)
	}
	requireOK(t, post(first), true)
	requireStatus(t, post(stripeRedelivery(5, 1, "req_1")), http.StatusConflict)
	requireStatus(t, post(stripeRedelivery(6, 2, "req_1")), http.StatusConflict)
	require.Equal(t, rows{Inbox: 1}, k.rows(t))
}
