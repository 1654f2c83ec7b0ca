package fakepay

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHeader sets faults for one request, in the form of ParseFaults.
const FaultHeader = "Fakepay-Fault"

// Faults are the failures fakepay injects. Counted faults apply to the first N requests of each
// idempotency key, so a retry with the same key eventually gets through.
//
// The Webhook faults act on webhook deliveries (see WebhookConfig), which belong to no request:
// they are read from the run's faults (Config.Faults, PUT /faults, -faults) when a delivery is
// queued or sent, never from a request's FaultHeader.
type Faults struct {
	// Fail500 answers 500 to the first N requests of a key before anything happens, as a load
	// balancer in front of the provider would; nothing is stored, so a retry proceeds.
	Fail500 int `json:"fail_500,omitempty"`
	// RateLimit answers 429 with Retry-After to the first N requests of a key.
	RateLimit int `json:"rate_limit,omitempty"`
	// RetryAfter is the Retry-After of RateLimit, in whole seconds (default 1).
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// Slow delays each request's execution, while its key is in flight: a concurrent duplicate
	// gets 409. The request is applied at the end of the delay whether or not its caller still
	// waits: one held past the caller's timeout lands later, as a provider's queued request does.
	Slow time.Duration `json:"slow,omitempty"`
	// Decline declines every charge, as a card_error; the response is stored and replayed.
	Decline bool `json:"decline,omitempty"`
	// Drop applies the first N requests of a key, stores their response, then drops the
	// connection without answering: the caller cannot tell whether it happened.
	Drop int `json:"drop,omitempty"`
	// IgnoreKeys makes fakepay a provider that does not deduplicate: the Idempotency-Key is
	// counted (Ledger.RequestsByKey) but neither stored nor checked, so every request is
	// executed and a request sent twice charges twice. A caller finds its charges through the
	// token in their metadata (GET /v1/charges/search), as a reconcile function does.
	IgnoreKeys bool `json:"ignore_keys,omitempty"`

	// WebhookDuplicate sends each event N extra times: the first copy together with the event's
	// first delivery (concurrently, so a receiver sees both at once), the others queued behind.
	// Each copy is delivered at least once, like the event itself.
	WebhookDuplicate int `json:"webhook_duplicate,omitempty"`
	// WebhookDelay holds each delivery (a copy and a replay too) for a random time up to it
	// before its first attempt. Deliveries go out as they fall due, so events may overtake one
	// another.
	WebhookDelay time.Duration `json:"webhook_delay,omitempty"`
	// WebhookReorder sends the due deliveries in random order rather than in the order queued:
	// events of one charge too, so charge.refunded may arrive before charge.succeeded. It
	// shuffles what is waiting, which takes a slow receiver or WebhookDelay.
	WebhookReorder bool `json:"webhook_reorder,omitempty"`
	// WebhookFail sends the first N attempts of each event and then treats each answer as lost,
	// whatever it was: the receiver got the event, yet fakepay sends it again, as Stripe does
	// when its connection breaks before the answer. Ledger.Webhooks.Delivered counts those 2xx.
	WebhookFail int `json:"webhook_fail,omitempty"`
}

// ParseFaults reads faults written as comma-separated fields: "fail_500=2", "rate_limit=1",
// "retry_after=2s", "slow=200ms", "decline", "drop=1", "ignore_keys", "webhook_duplicate=2",
// "webhook_delay=500ms", "webhook_reorder", "webhook_fail=1".
func ParseFaults(s string) (Faults, error) {
	var f Faults
	for field := range strings.SplitSeq(s, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(field), "=")
		var err error
		switch name {
		case "":
		case "fail_500":
			f.Fail500, err = strconv.Atoi(value)
		case "rate_limit":
			f.RateLimit, err = strconv.Atoi(value)
		case "retry_after":
			f.RetryAfter, err = time.ParseDuration(value)
		case "slow":
			f.Slow, err = time.ParseDuration(value)
		case "decline":
			f.Decline = true
		case "drop":
			f.Drop, err = strconv.Atoi(value)
		case "ignore_keys":
			f.IgnoreKeys = true
		case "webhook_duplicate":
			f.WebhookDuplicate, err = strconv.Atoi(value)
		case "webhook_delay":
			f.WebhookDelay, err = time.ParseDuration(value)
		case "webhook_reorder":
			f.WebhookReorder = true
		case "webhook_fail":
			f.WebhookFail, err = strconv.Atoi(value)
		default:
			err = fmt.Errorf("unknown fault %q (known: fail_500, rate_limit, retry_after, slow, decline, drop, ignore_keys, "+
				"webhook_duplicate, webhook_delay, webhook_reorder, webhook_fail)", name)
		}
		if err != nil {
			return Faults{}, fmt.Errorf("fault %q: %w", field, err)
		}
	}
	return f, nil
}

// merge returns f with the fields that o sets.
func (f Faults) merge(o Faults) Faults {
	if o.Fail500 > 0 {
		f.Fail500 = o.Fail500
	}
	if o.RateLimit > 0 {
		f.RateLimit = o.RateLimit
	}
	if o.RetryAfter > 0 {
		f.RetryAfter = o.RetryAfter
	}
	if o.Slow > 0 {
		f.Slow = o.Slow
	}
	if o.Decline {
		f.Decline = true
	}
	if o.Drop > 0 {
		f.Drop = o.Drop
	}
	if o.IgnoreKeys {
		f.IgnoreKeys = true
	}
	if o.WebhookDuplicate > 0 {
		f.WebhookDuplicate = o.WebhookDuplicate
	}
	if o.WebhookDelay > 0 {
		f.WebhookDelay = o.WebhookDelay
	}
	if o.WebhookReorder {
		f.WebhookReorder = true
	}
	if o.WebhookFail > 0 {
		f.WebhookFail = o.WebhookFail
	}
	return f
}
