package webhook

import (
	"encoding/json"
	"maps"
)

// stripeDeliveryMetadata are the top-level fields of a Stripe event that a redelivery of the
// same event may change, and that are no part of what the event says:
//
//   - "pending_webhooks" is, per Stripe's event object reference
//     (https://docs.stripe.com/api/events/object), the "number of webhooks that haven't been
//     successfully delivered" for the event: it counts down as the account's other endpoints
//     answer, so each retry or manual resend of one event may carry another value.
//   - "request" is "information on the API request that triggers the event" (its ID and
//     idempotency key): it describes the call that caused the event, not the event.
//
// Everything else is the event: its "data" (which, the same page says, never changes: "the
// contents of data never change"), "type", "created", "api_version", "livemode", "account". Stripe's
// guide to duplicate events (https://docs.stripe.com/webhooks#handle-duplicate-events) asks a
// receiver to log the event IDs it has processed and not process a logged one again: a
// redelivery is recognised by its event ID. So a redelivery that differs only in these fields
// is answered 200 as a duplicate, and one whose event differs is answered 409, since one event
// ID with two contents is not a redelivery Stripe makes: a bug, or a sender holding the secret.
//
// A false 409 would cost more than a false duplicate: Stripe retries a non-2xx for three days,
// then disables the endpoint, while a delivery taken as a duplicate here loses nothing the
// consumer acts on (the event's data is the same).
//
// One limit: past HandlerConfig.Retention the inbox has forgotten the ID, and while the outbox
// still keeps the delivered message (outbox.Config.Retention) the outbox compares whole bodies,
// so a redelivery then that differs only in metadata is answered 409. With the defaults (30 days
// against the outbox's 7 after delivery) that takes a message still undelivered (dead) after 30
// days.
var stripeDeliveryMetadata = []string{"pending_webhooks", "request"}

// stripeContent is the Content of a Stripe event whose top-level fields are fields: the object
// without its delivery metadata, re-encoded (keys sorted, values compacted) so that the white
// space and key order of a redelivery do not matter either.
func stripeContent(fields map[string]json.RawMessage) ([]byte, error) {
	content := maps.Clone(fields)
	for _, name := range stripeDeliveryMetadata {
		delete(content, name)
	}
	return json.Marshal(content)
}
