package webhook

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SignStripe returns the Stripe-Signature header value that Stripe would send for body at t,
// signed with secret: "t=<unix seconds>,v1=<hex HMAC-SHA256>". It is for tests and for senders
// that speak Stripe's scheme; Stripe.Verify accepts it within the tolerance of t. To sign for a
// rotation, join the values' v1 elements: Stripe sends one per live secret.
func SignStripe(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac([]byte(secret), []byte(ts), []byte("."), body))
}

// SignStandardWebhooks returns the three headers of a Standard Webhooks delivery of body with
// event ID id at t, signed with secret ("whsec_<base64>", the prefix optional): webhook-id,
// webhook-timestamp and webhook-signature ("v1,<base64 HMAC-SHA256>"). StandardWebhooks.Verify
// accepts them within the tolerance of t.
//
// It returns an error for a secret that StandardWebhooks.Validate would refuse, for an empty id
// or one with a '.' or a control character (the specification forbids '.', which would let one
// signature stand for another split of ID, timestamp and body), and for t before 1970.
func SignStandardWebhooks(secret, id string, t time.Time, body []byte) (http.Header, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook.SignStandardWebhooks: secret %w", err)
	}
	switch {
	case id == "":
		return nil, errors.New("webhook.SignStandardWebhooks: id is empty; give the event's unique ID")
	case strings.Contains(id, "."):
		return nil, fmt.Errorf("webhook.SignStandardWebhooks: id %q contains '.', which the Standard Webhooks specification forbids", id)
	case checkID(schemeStandardWebhooks, id) != nil:
		return nil, fmt.Errorf("webhook.SignStandardWebhooks: id %q is not printable UTF-8", id)
	case t.Unix() < 0:
		return nil, fmt.Errorf("webhook.SignStandardWebhooks: t %v is before 1970", t)
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	h := make(http.Header)
	h.Set(headerWebhookID, id)
	h.Set(headerWebhookTime, ts)
	h.Set(headerWebhookSig, "v1,"+base64.StdEncoding.EncodeToString(mac(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)))
	return h, nil
}
