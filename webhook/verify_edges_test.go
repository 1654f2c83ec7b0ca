package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/webhook"
)

// lastSecond is 9999-12-31T23:59:59Z, the latest timestamp the verifiers read.
var lastSecond = time.Unix(253402300799, 0).UTC()

// Both schemes read every timestamp a signer can write, from the epoch ("0", the one timestamp
// whose only digit is a zero) to the last second of year 9999 (twelve digits), and refuse the
// second after it.
func TestVerifyReadsTimestampsFromTheEpochToYear9999(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)
	stripe := webhook.Stripe{Secrets: []string{stripeSecret}}
	sw := webhook.StandardWebhooks{Secrets: []string{swSecret}}
	for _, at := range []time.Time{time.Unix(0, 0).UTC(), lastSecond} {
		t.Run(at.Format(time.RFC3339), func(t *testing.T) {
			t.Parallel()

			got, err := stripe.Verify(stripeHeader(webhook.SignStripe(stripeSecret, at, body)), body, at)
			require.NoError(t, err)
			require.Equal(t, webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: at, Content: body}, got)

			got, err = sw.Verify(signStandard(t, swSecret, "msg_1", at, body), body, at)
			require.NoError(t, err)
			require.Equal(t, webhook.Delivery{ID: "msg_1", Type: "charge.succeeded", Timestamp: at}, got)
		})
	}

	t.Run("AfterYear9999", func(t *testing.T) {
		t.Parallel()

		const after = "253402300800"
		_, err := stripe.Verify(stripeHeader("t="+after+","+v1(webhook.SignStripe(stripeSecret, lastSecond, body))), body, lastSecond)
		require.ErrorIs(t, err, webhook.ErrMalformed)
		h := signStandard(t, swSecret, "msg_1", lastSecond, body)
		h.Set("Webhook-Timestamp", after)
		_, err = sw.Verify(h, body, lastSecond)
		require.ErrorIs(t, err, webhook.ErrMalformed)
	})
}

// A refusal's Detail points at what is wrong: which element or signature of the header (counted
// from 1), how many hex digits a signature must have, and how far the timestamp is from now (a
// positive duration, before or after now).
func TestRefusalDetailSaysWhatIsWrong(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)
	at := "t=" + strconv.FormatInt(now.Unix(), 10)
	good := v1(webhook.SignStripe(stripeSecret, now, body))
	swGood := signStandard(t, swSecret, "msg_1", now, body).Get("Webhook-Signature")
	sw := func(sig string) http.Header {
		h := signStandard(t, swSecret, "msg_1", now, body)
		h.Set("Webhook-Signature", sig)
		return h
	}
	stripe := webhook.Stripe{Secrets: []string{stripeSecret}}
	standard := webhook.StandardWebhooks{Secrets: []string{swSecret}}

	tests := []struct {
		name     string
		verifier webhook.Verifier
		header   http.Header
		want     string
	}{
		{name: "StripeElementNotKeyValue", verifier: stripe, header: stripeHeader(at + ",," + good), want: "element 2 is not key=value"},
		{name: "StripeSignatureNotHex", verifier: stripe, header: stripeHeader(at + "," + good + ",v1=abcd"), want: "v1 signature 2 is not 64 hex digits"},
		{name: "StripeStalePast", verifier: stripe, header: stripeHeader(webhook.SignStripe(stripeSecret, now.Add(-6*time.Minute), body)), want: ", 6m0s before now"},
		{name: "StripeStaleFuture", verifier: stripe, header: stripeHeader(webhook.SignStripe(stripeSecret, now.Add(6*time.Minute), body)), want: ", 6m0s after now"},
		{name: "StandardEntryWithoutComma", verifier: standard, header: sw(swGood + " v1"), want: "entry 2 is not <version>,<signature>"},
		{name: "StandardSignatureNotBase64", verifier: standard, header: sw(swGood + " v1,aGVsbG8="), want: "v1 signature 2 is not a base64 HMAC-SHA256"},
		{name: "StandardStaleFuture", verifier: standard, header: signStandard(t, swSecret, "msg_1", now.Add(6*time.Minute), body), want: ", 6m0s after now"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			_, err := tc.verifier.Verify(tc.header, body, now)
			verr, ok := errors.AsType[*webhook.VerifyError](err)
			require.True(t, ok, "want a *webhook.VerifyError, got %T: %v", err, err)
			require.Contains(t, verr.Detail, tc.want)
		})
	}
}
