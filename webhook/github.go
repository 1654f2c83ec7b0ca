package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// GitHub verifies GitHub's webhook signature: X-Hub-Signature-256 is "sha256=<hex>", the
// HMAC-SHA256 of the body keyed with the webhook's secret; the Delivery's ID is
// X-GitHub-Delivery and its Type X-GitHub-Event. Any secret that matches passes, compared in
// constant time. The older X-Hub-Signature (SHA-1) is not read.
//
// Verify checks, in this order: X-Hub-Signature-256 is there (ErrNoSignature) and well-formed
// (ErrMalformed); it matches (ErrSignature); then X-GitHub-Delivery is there, one, and printable
// (ErrMalformed).
//
// GitHub signs the body only: no timestamp, so ErrStale is never reported and a captured
// delivery stays valid for ever; and not the delivery ID, so a captured body replayed under
// another X-GitHub-Delivery is a new delivery to the handler. Treat the events as hints to act
// on idempotently (the body's own IDs), and keep the secret as secret as any credential.
//
// The zero value verifies nothing: set Secrets. Verify returns Validate's error, which is not a
// *VerifyError, when the configuration is invalid.
type GitHub struct {
	// Secrets are the webhook's secrets, as typed into the webhook's settings on GitHub and used
	// as raw bytes; several while rotating. Required.
	Secrets []string
}

var _ Verifier = GitHub{}

// Validate reports every bad field at once: no secret, an empty secret, a secret with white
// space around it. A handler calls it once, at construction.
func (g GitHub) Validate() error {
	return validateConfig("webhook.GitHub", g.Secrets, 0, func(string) error { return nil })
}

// Verify implements Verifier; see GitHub for what it checks. now is not used: GitHub signs no
// timestamp.
func (g GitHub) Verify(header http.Header, body []byte, _ time.Time) (Delivery, error) {
	if err := g.Validate(); err != nil {
		return Delivery{}, err
	}
	value, err := singleHeader(schemeGitHub, header, headerGitHubSignature, ErrNoSignature)
	if err != nil {
		return Delivery{}, err
	}
	digits, ok := strings.CutPrefix(value, "sha256=")
	if !ok {
		return Delivery{}, reject(schemeGitHub, ErrMalformed, "X-Hub-Signature-256 does not start with sha256=; want sha256=<hex HMAC-SHA256 of the body>")
	}
	sig, err := hex.DecodeString(digits)
	if err != nil || len(sig) != sha256.Size {
		return Delivery{}, reject(schemeGitHub, ErrMalformed, "X-Hub-Signature-256 is not sha256= and %d hex digits", 2*sha256.Size)
	}
	signed := func(secret string) []byte { return mac([]byte(secret), body) }
	if !anyMatch(g.Secrets, signed, [][]byte{sig}) {
		return Delivery{}, reject(schemeGitHub, ErrSignature, "X-Hub-Signature-256 does not match the configured secrets; check that Secrets holds the webhook's secret as typed in its settings on GitHub, and that Verify gets the body exactly as received, not decoded and re-encoded")
	}
	id, err := singleHeader(schemeGitHub, header, headerGitHubDelivery, ErrMalformed)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkID(schemeGitHub, id); err != nil {
		return Delivery{}, err
	}
	// The event type is information, not identity: one that cannot be read is left out.
	typ, err := singleHeader(schemeGitHub, header, headerGitHubEvent, ErrMalformed)
	if err != nil || checkID(schemeGitHub, typ) != nil {
		typ = ""
	}
	return Delivery{ID: id, Type: typ}, nil
}
