package downstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Defaults of BreakerConfig.
const (
	BreakerFailuresDefault = 5
	BreakerOpenDefault     = 5 * time.Second
	BreakerOpenMaxDefault  = time.Minute
	BreakerProbesDefault   = 1
)

// BreakerConfig configures the circuit breaker of a Transport: off unless Enabled. Enabled with
// every other field zero, a host's circuit opens after BreakerFailuresDefault failures in a row,
// stays open BreakerOpenDefault, then lets BreakerProbesDefault probe through.
//
// A failure is an answer that says the host is not well: a 5xx, a 429, or no answer at all (a
// refused or broken connection, a timeout). Any other answer, a 4xx included, is a success: the
// host is up and answering. A request the caller cancelled counts as neither, and a Base that
// panics counts as a failure.
//
// The state is a few words per host that has failed, kept for the Transport's life.
type BreakerConfig struct {
	// Enabled turns the breaker on. Off by default: a Transport sends every request, whatever
	// the host did before, and Temporal's retry policy alone paces the attempts.
	Enabled bool
	// Failures is how many failures in a row at one host open its circuit. Default
	// BreakerFailuresDefault.
	Failures int
	// Open is how long a circuit stays open the first time. Each time a probe fails the circuit
	// opens again for twice as long as the last time, up to OpenMax; a successful probe closes
	// it and starts over from Open. Default BreakerOpenDefault.
	Open time.Duration
	// OpenMax caps the open period. Default BreakerOpenMaxDefault, or Open when that is longer.
	OpenMax time.Duration
	// Probes is how many requests at most a half-open circuit lets through at once (the open
	// period over, no answer yet). The first to succeed closes the circuit, the first to fail
	// opens it again; the others are refused meanwhile. Default BreakerProbesDefault.
	Probes int
	// Now is the breaker's clock; default time.Now. Tests give it a clock they move by hand.
	Now func() time.Time
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c BreakerConfig) WithDefaults() BreakerConfig {
	c.Failures = cmp.Or(c.Failures, BreakerFailuresDefault)
	c.Open = cmp.Or(c.Open, BreakerOpenDefault)
	c.OpenMax = cmp.Or(c.OpenMax, max(BreakerOpenMaxDefault, c.Open))
	c.Probes = cmp.Or(c.Probes, BreakerProbesDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate reports the first field of c (after defaults) that cannot work.
func (c BreakerConfig) validate() error {
	switch {
	case c.Failures < 0:
		return &ConfigError{Field: "Transport.Breaker.Failures", Problem: fmt.Sprintf("is %d; want 1 or more (0 for the default %d), or leave Enabled false", c.Failures, BreakerFailuresDefault)}
	case c.Open < 0:
		return &ConfigError{Field: "Transport.Breaker.Open", Problem: fmt.Sprintf("is %v; want a positive duration (0 for the default %v)", c.Open, BreakerOpenDefault)}
	case c.OpenMax < c.Open:
		return &ConfigError{Field: "Transport.Breaker.OpenMax", Problem: fmt.Sprintf("is %v, below Open (%v); want Open or more (0 for the default)", c.OpenMax, c.Open)}
	case c.Probes < 0:
		return &ConfigError{Field: "Transport.Breaker.Probes", Problem: fmt.Sprintf("is %d; want 1 or more (0 for the default %d)", c.Probes, BreakerProbesDefault)}
	}
	return nil
}

// ConfigError reports a Transport setting that cannot work: Field names it, Problem says what
// is wrong and what it must be. Transport.RoundTrip returns it for every request, unsent, and
// Check makes it a non-retryable ErrTypeMisconfigured: retrying cannot mend a configuration.
type ConfigError struct {
	Field, Problem string
}

func (e *ConfigError) Error() string { return "downstream." + e.Field + " " + e.Problem }

// NotApplied reports that the request was not sent.
func (e *ConfigError) NotApplied() bool { return true }

// CircuitOpenError refuses a request, unsent, because the circuit of its host is open: the host
// failed Transport.Breaker.Failures times in a row, or a probe failed, and the open period is
// not over; or the circuit is half-open and its probes are already in flight. Try again at
// RetryAt. Check makes it a retryable ErrTypeCircuitOpen whose next retry delay reaches past
// RetryAt. It is never sent, so it is also NotApplied.
type CircuitOpenError struct {
	// Host is the circuit's host, as host:port.
	Host string
	// RetryAt is when the open period ends (or, with the probes in flight, when one more
	// Open period has passed).
	RetryAt time.Time
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("circuit open for %s: it failed recently, so the request was not sent; retry at %s (retrying is safe)",
		e.Host, e.RetryAt.UTC().Format(time.RFC3339Nano))
}

// NotApplied reports that the request was not sent.
func (e *CircuitOpenError) NotApplied() bool { return true }

// outcome is what an answer says of its host's health.
type outcome int

const (
	neutral outcome = iota // the caller gave up: says nothing of the host
	healthy
	failed
)

// outcomeOf classifies what RoundTrip got for a request sent with ctx.
func outcomeOf(ctx context.Context, resp *http.Response, err error) outcome {
	switch {
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		return neutral
	case err != nil:
		return failed
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return failed
	}
	return healthy
}

// breaker holds the circuits of one Transport, one per host that has failed. A circuit is
// closed (every request goes), open (none goes until until), or half-open (open, until passed:
// up to Probes go at once).
type breaker struct {
	cfg   BreakerConfig
	mu    sync.Mutex
	hosts map[string]*circuit
	gen   uint64 // the last generation handed out
}

type circuit struct {
	// gen changes on every open and close: an answer to a request let through under another
	// generation (sent before the circuit opened, or a probe of an earlier half-open period)
	// says nothing of the circuit as it is now, and is ignored.
	gen      uint64
	failures int  // in a row, while closed
	open     bool // open or half-open
	until    time.Time
	openFor  time.Duration // the last open period
	probes   int           // in flight, while half-open
}

// ticket is a request let through, to be reported with done.
type ticket struct {
	host  string
	gen   uint64
	probe bool
}

// admit lets a request to host through, or refuses it with a *CircuitOpenError.
func (b *breaker) admit(host string) (ticket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.hosts[host]
	if c == nil || !c.open {
		return ticket{host: host, gen: genOf(c)}, nil
	}
	now := b.cfg.Now()
	if now.Before(c.until) {
		return ticket{}, &CircuitOpenError{Host: host, RetryAt: c.until}
	}
	if c.probes >= b.cfg.Probes {
		return ticket{}, &CircuitOpenError{Host: host, RetryAt: now.Add(b.cfg.Open)}
	}
	c.probes++
	return ticket{host: host, gen: c.gen, probe: true}, nil
}

func genOf(c *circuit) uint64 {
	if c == nil {
		return 0
	}
	return c.gen
}

// done reports the outcome of a request that admit let through.
func (b *breaker) done(t ticket, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.hosts[t.host]
	if c == nil {
		if o != failed {
			return // a healthy host leaves no trace
		}
		c = &circuit{}
		if b.hosts == nil {
			b.hosts = map[string]*circuit{}
		}
		b.hosts[t.host] = c
	}
	if t.gen != c.gen {
		return
	}
	switch {
	case t.probe && o == neutral:
		c.probes--
	case t.probe && o == healthy:
		*c = circuit{gen: b.next()}
	case t.probe: // failed
		b.reopen(c, min(2*c.openFor, b.cfg.OpenMax))
	case o == healthy:
		c.failures = 0
	case o == failed:
		if c.failures++; c.failures >= b.cfg.Failures {
			b.reopen(c, b.cfg.Open)
		}
	}
}

// reopen opens c for d from now.
func (b *breaker) reopen(c *circuit, d time.Duration) {
	*c = circuit{gen: b.next(), open: true, until: b.cfg.Now().Add(d), openFor: d}
}

func (b *breaker) next() uint64 {
	b.gen++
	return b.gen
}

// hostOf returns the circuit key of req: its URL's lower-case host name and port, the scheme's default
// port when it names none.
func hostOf(req *http.Request) string {
	host, port := strings.ToLower(req.URL.Hostname()), req.URL.Port()
	if port == "" {
		port = "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port)
}
