package webhook

import (
	"cmp"
	"fmt"
	"time"
)

// ConfigError is NewHandler's error for a setting that cannot work: Field names it
// ("HandlerConfig.MaxBodyBytes"), and Problem says what is wrong and what to do. Match it with
// errors.As. A verifier's own Validate errors are wrapped as they are.
type ConfigError struct {
	Field, Problem string
}

func (e *ConfigError) Error() string { return "webhook." + e.Field + " " + e.Problem }

// signatureTolerance is how far from now v accepts a signed timestamp, and false for a verifier
// that signs none (GitHub) or that the handler does not know (one of the caller's own).
func signatureTolerance(v Verifier) (time.Duration, bool) {
	switch v := v.(type) {
	case Stripe:
		return cmp.Or(v.Tolerance, ToleranceDefault), true
	case *Stripe:
		return cmp.Or(v.Tolerance, ToleranceDefault), true
	case StandardWebhooks:
		return cmp.Or(v.Tolerance, ToleranceDefault), true
	case *StandardWebhooks:
		return cmp.Or(v.Tolerance, ToleranceDefault), true
	}
	return 0, false
}

// checkRetention refuses a retention that forgets a delivery ID while a replay of the delivery
// still passes v's timestamp check. A delivery is taken when its signed time is within the
// tolerance of now, in either direction, so a replay of it passes for up to twice the tolerance
// after it was taken: the ID must be remembered at least that long, or the replay is a new
// event. GitHub signs no timestamp, so no retention covers its replays (see GitHub); nor can the
// handler know a verifier of the caller's own.
func checkRetention(v Verifier, retention time.Duration) error {
	tolerance, ok := signatureTolerance(v)
	if !ok || retention >= 2*tolerance {
		return nil
	}
	return &ConfigError{Field: "HandlerConfig.Retention", Problem: fmt.Sprintf(
		"is %v, shorter than twice the verifier's signature tolerance (%v): a delivery replayed within the tolerance after its ID was forgotten would be taken again as a new event; set Retention to at least %v, or lower the verifier's Tolerance",
		retention, tolerance, 2*tolerance)}
}

// checkBodyLimit refuses a body limit above the outbox's payload limit: the handler stores the
// body as the payload, so a body between the two would pass the handler's check and fail the
// outbox's, answered 503 on every retry of the provider, for ever.
func checkBodyLimit(maxBody int64, maxPayload int) error {
	if maxBody <= int64(maxPayload) {
		return nil
	}
	return &ConfigError{Field: "HandlerConfig.MaxBodyBytes", Problem: fmt.Sprintf(
		"is %d, above the outbox's MaxPayloadBytes (%d): a body between the two would be taken, then refused by the outbox, and answered 503 on every retry; lower MaxBodyBytes to at most %d, or raise outbox.Config.MaxPayloadBytes",
		maxBody, maxPayload, maxPayload)}
}
