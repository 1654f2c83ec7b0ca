package stripe_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v84"
	stripewebhook "github.com/stripe/stripe-go/v84/webhook"

	"github.com/tempotent/tempotent/webhook"
)

// The webhook package's Stripe scheme against stripe-go's own: what one signs, the other
// verifies, byte for byte.

const webhookSecret = "whsec_crosscheck_0123456789abcdef"

// eventPayload is an event as Stripe sends it, with the API version stripe-go expects, so that
// ConstructEvent takes it without options.
func eventPayload(id string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":%q,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent"}}}`,
		id, stripego.APIVersion)
}

func TestWebhookStripeGoSignsTempotentVerifies(t *testing.T) {
	t.Parallel()

	payload := eventPayload("evt_stripego")
	ts := time.Unix(1_750_000_000, 0)
	signed := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: payload, Secret: webhookSecret, Timestamp: ts})
	header := http.Header{"Stripe-Signature": {signed.Header}}

	require.Equal(t, signed.Header, webhook.SignStripe(webhookSecret, ts, payload), "the two signers disagree")

	got, err := webhook.Stripe{Secrets: []string{"whsec_previous", webhookSecret}}.Verify(header, payload, ts.Add(time.Minute))
	require.NoError(t, err)
	require.NotEmpty(t, got.Content, "the verifier gave no content to compare a redelivery by")
	got.Content = nil
	require.Equal(t, webhook.Delivery{ID: "evt_stripego", Type: "payment_intent.succeeded", Timestamp: ts.UTC()}, got)

	_, err = webhook.Stripe{Secrets: []string{"whsec_previous"}}.Verify(header, payload, ts)
	require.ErrorIs(t, err, webhook.ErrSignature)
	_, err = webhook.Stripe{Secrets: []string{webhookSecret}}.Verify(header, payload, ts.Add(webhook.ToleranceDefault+time.Second))
	require.ErrorIs(t, err, webhook.ErrStale)
}

func TestWebhookTempotentSignsStripeGoVerifies(t *testing.T) {
	t.Parallel()

	payload := eventPayload("evt_tempotent")
	header := webhook.SignStripe(webhookSecret, time.Now(), payload) // stripe-go checks against its own clock

	require.NoError(t, stripewebhook.ValidatePayload(payload, header, webhookSecret))
	event, err := stripewebhook.ConstructEvent(payload, header, webhookSecret)
	require.NoError(t, err)
	require.Equal(t, "evt_tempotent", event.ID)
	require.Equal(t, stripego.EventTypePaymentIntentSucceeded, event.Type)

	// stripe-go refuses what tempotent signs with another secret, over another body, or too
	// long ago: it checks what tempotent signs, not merely its shape.
	require.ErrorIs(t, stripewebhook.ValidatePayload(payload, webhook.SignStripe("whsec_other", time.Now(), payload), webhookSecret), stripewebhook.ErrNoValidSignature)
	require.ErrorIs(t, stripewebhook.ValidatePayload(eventPayload("evt_other"), header, webhookSecret), stripewebhook.ErrNoValidSignature)
	stale := webhook.SignStripe(webhookSecret, time.Now().Add(-stripewebhook.DefaultTolerance-time.Minute), payload)
	require.ErrorIs(t, stripewebhook.ValidatePayload(payload, stale, webhookSecret), stripewebhook.ErrTooOld)
}
