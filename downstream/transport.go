package downstream

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/tempotent/tempotent/keys"
)

// HeaderDefault is the header that carries the token unless Transport.Header says otherwise.
const HeaderDefault = "Idempotency-Key"

// ErrNoKey is matched by *NoKeyError.
var ErrNoKey = errors.New("unsafe request without an idempotency key")

// NoKeyError refuses an unsafe request that has no idempotency key: sending it would make a
// retry a second effect. It is never sent, so it is also NotApplied.
type NoKeyError struct {
	Method, URL, Header string
}

func (e *NoKeyError) Error() string {
	return fmt.Sprintf("%s %s: refusing to send an unsafe request without %s: call it from an activity wrapped by tempotent (the token comes from keys.TokenFrom), or set the header yourself", e.Method, e.URL, e.Header)
}

func (e *NoKeyError) Is(target error) bool { return target == ErrNoKey }

// NotApplied reports that the request was not sent.
func (e *NoKeyError) NotApplied() bool { return true }

// Transport is an http.RoundTripper that puts the running intent's token (keys.TokenFrom on the
// request's context) in the idempotency header of every unsafe request (POST, PUT, PATCH,
// DELETE) and refuses to send one that has no key. A header the caller set on purpose is never
// overwritten. Safe methods pass through untouched.
//
// An unsafe request is sent once per RoundTrip. Left alone, net/http sends a request that
// carries an Idempotency-Key again by itself when a reused connection breaks after the request
// was written; to a downstream that does not deduplicate, that is a second effect that no
// receipt sees. Transport turns that re-send off: the caller gets the error, and whether to send
// again is the receipt's decision (the next attempt, with the same token, or a reconcile).
//
//	client := &http.Client{Transport: &downstream.Transport{}}
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body) // ctx: the activity's context
//
// With Breaker.Enabled, every request, safe or not, also goes through a circuit breaker per host
// (see BreakerConfig): after a host failed Breaker.Failures times in a row, requests to it are refused unsent with a
// *CircuitOpenError until its open period is over, then a few probes go; the first to succeed
// closes the circuit. A provider that is down is then not called by every attempt of every
// workflow, and the attempts refused are told when to come back (Check turns the refusal into a
// retryable error whose next retry delay is past RetryAt). The breaker's state lives in the
// Transport value: share one Transport (one http.Client) among every call to a provider; a
// Transport made per request never opens. A Transport must not be copied after first use.
//
// The zero Transport uses http.DefaultTransport and HeaderDefault, with no breaker; set
// Breaker.Enabled to have one (a 500 for one request counts against its whole host, so turn it
// on for providers whose 5xx mean the host is unwell, and share the Transport).
type Transport struct {
	// Base sends the request; default http.DefaultTransport.
	Base http.RoundTripper
	// Header names the idempotency header, e.g. "PayPal-Request-Id". Default HeaderDefault.
	Header string
	// Format renders the token; default the token itself. Use keys.Token.UUID for APIs that
	// want a UUID.
	Format func(keys.Token) string
	// Breaker configures the circuit breaker per host; the zero value is none.
	Breaker BreakerConfig

	once    sync.Once
	breaker *breaker // nil unless Breaker.Enabled
	err     error    // of Breaker's settings
}

// Validate reports a Breaker setting that cannot work, as a *ConfigError naming the field.
// RoundTrip returns the same error for every request, without sending it.
func (t *Transport) Validate() error {
	t.once.Do(func() {
		cfg := t.Breaker.WithDefaults()
		if t.err = cfg.validate(); t.err == nil && cfg.Enabled {
			t.breaker = &breaker{cfg: cfg}
		}
	})
	return t.err
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip implements http.RoundTripper. It does not modify req: a request that needs the
// header is cloned first.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.Validate(); err != nil {
		return nil, refuse(req, err)
	}
	out, err := t.keyed(req)
	if err != nil {
		return nil, refuse(req, err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.breaker == nil {
		return base.RoundTrip(out)
	}
	pass, err := t.breaker.admit(hostOf(req))
	if err != nil {
		return nil, refuse(req, err)
	}
	return t.sendCounted(base, out, pass)
}

// sendCounted sends out and reports its outcome to the breaker. A Base that panics counts as a
// failure before the panic goes on: a probe that never reported would hold its place, and the
// circuit would refuse its host for good.
func (t *Transport) sendCounted(base http.RoundTripper, out *http.Request, pass ticket) (resp *http.Response, err error) {
	reported := false
	defer func() {
		if !reported {
			t.breaker.done(pass, failed)
		}
	}()
	resp, err = base.RoundTrip(out)
	reported = true
	t.breaker.done(pass, outcomeOf(out.Context(), resp, err))
	return resp, err
}

// keyed returns the request to send for req: req itself for a safe method, else a clone that
// carries the idempotency key and is never re-sent by net/http; or a *NoKeyError.
func (t *Transport) keyed(req *http.Request) (*http.Request, error) {
	if !Unsafe(req.Method) {
		return req, nil
	}
	header := t.Header
	if header == "" {
		header = HeaderDefault
	}
	if req.Header.Get(header) != "" {
		return sentOnce(req.Clone(req.Context())), nil
	}
	tok, ok := keys.TokenFrom(req.Context())
	if !ok {
		return nil, &NoKeyError{Method: req.Method, URL: req.URL.Redacted(), Header: header}
	}
	value := tok.String()
	if t.Format != nil {
		value = t.Format(tok)
	}
	out := req.Clone(req.Context())
	out.Header.Set(header, value)
	return sentOnce(out), nil
}

// refuse closes req's body, as RoundTrip must even when it sends nothing, and returns err.
func refuse(req *http.Request, err error) error {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return err
}

// sentOnce makes net/http treat out as not replayable, so that it never sends it again on its
// own: net/http replays a request only if it can rewind its body (GetBody) or it has none. A
// request without a body gets an empty one of unknown length, which net/http sends as an empty
// chunked body (POST, PUT, PATCH) or as no body at all (DELETE, after probing it).
func sentOnce(out *http.Request) *http.Request {
	if out.Body == nil || out.Body == http.NoBody {
		out.Body = io.NopCloser(strings.NewReader(""))
	}
	out.GetBody = nil
	return out
}

// Unsafe reports whether an HTTP method changes state (RFC 9110 §9.2.1), and so needs a key.
func Unsafe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}
