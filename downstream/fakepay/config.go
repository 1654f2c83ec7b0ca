package fakepay

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// RetentionDefault is how long fakepay remembers an idempotency key, as Stripe does.
const RetentionDefault = 24 * time.Hour

// Config configures a Server. The zero Config (or nil) keeps its state in memory.
type Config struct {
	// StatePath, when set, is a JSON file that holds the ledger and the stored responses. It is
	// read at start and rewritten (atomically, fsynced) after every change, so a fakepay process
	// that is restarted keeps its ledger and its idempotency memory.
	StatePath string
	// Retention is how long a key's stored response is kept; default RetentionDefault.
	Retention time.Duration
	// Faults apply to every request, merged with the request's own FaultHeader.
	Faults Faults
	// Webhooks configures webhook events and asynchronous charges; see WebhookConfig.
	Webhooks WebhookConfig
}

// withDefaults returns c with its defaults applied.
func (c Config) withDefaults() Config {
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	w := &c.Webhooks
	w.AsyncDelay = cmp.Or(w.AsyncDelay, AsyncDelayDefault)
	w.RetryMin = cmp.Or(w.RetryMin, WebhookRetryMinDefault)
	w.RetryMax = cmp.Or(w.RetryMax, max(WebhookRetryMaxDefault, w.RetryMin))
	w.MaxAge = cmp.Or(w.MaxAge, WebhookMaxAgeDefault)
	w.Timeout = cmp.Or(w.Timeout, WebhookTimeoutDefault)
	return c
}

// validate names the first field of c (with defaults) that cannot work.
func (c Config) validate() error {
	w := c.Webhooks
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"Retention", c.Retention}, {"Webhooks.AsyncDelay", w.AsyncDelay}, {"Webhooks.RetryMin", w.RetryMin},
		{"Webhooks.RetryMax", w.RetryMax}, {"Webhooks.MaxAge", w.MaxAge}, {"Webhooks.Timeout", w.Timeout},
	} {
		if f.d < 0 {
			return fmt.Errorf("fakepay: Config.%s cannot be less than zero, got %v", f.name, f.d)
		}
	}
	if w.RetryMax < w.RetryMin {
		return fmt.Errorf("fakepay: Config.Webhooks.RetryMax (%v) cannot be less than RetryMin (%v)", w.RetryMax, w.RetryMin)
	}
	if w.URL == "" {
		return nil
	}
	if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("fakepay: Config.Webhooks.URL %q is not an http or https URL", w.URL)
	}
	if w.Secret == "" {
		return errors.New("fakepay: Config.Webhooks.Secret is required with Webhooks.URL: every delivery is signed with it")
	}
	return nil
}
