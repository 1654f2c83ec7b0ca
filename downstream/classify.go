package downstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/errtype"
)

// Temporal application error types of the errors Classify returns.
const (
	ErrTypeNetwork     = errtype.DownstreamNetwork     // retryable, same key
	ErrTypeUnavailable = errtype.DownstreamUnavailable // 5xx: retryable, same key
	ErrTypeRateLimited = errtype.DownstreamRateLimited // 429: retryable after Retry-After
	ErrTypeInFlight    = errtype.DownstreamInFlight    // 409 same key in flight: retryable
	// ErrTypeMismatch: the key was reused with another payload; non-retryable. It is the
	// activity package's ErrTypePayloadMismatch, whichever side found the mismatch.
	ErrTypeMismatch = errtype.PayloadMismatch
	ErrTypeRejected = errtype.DownstreamRejected // other 4xx (a declined card): non-retryable
	ErrTypeNoKey    = errtype.DownstreamNoKey    // an unsafe request without a key: non-retryable
	// ErrTypeCircuitOpen: the host's circuit is open (CircuitOpenError); the request was not
	// sent. Retryable, with a next retry delay past the end of the open period.
	ErrTypeCircuitOpen = errtype.DownstreamCircuitOpen
	// ErrTypeMisconfigured: a Transport setting cannot work (ConfigError); non-retryable. It is
	// the activity package's ErrTypeMisconfigured.
	ErrTypeMisconfigured = errtype.Misconfigured
)

// Kind is how an outcome is handled.
type Kind int

const (
	KindNetwork     Kind = iota + 1 // no response: ambiguous, unless the request was never sent
	KindUnavailable                 // 5xx
	KindRateLimited                 // 429
	KindInFlight                    // 409: the same key is being processed
	KindMismatch                    // 400/422 idempotency error: the key was used with other parameters
	KindRejected                    // any other 4xx
	KindCircuitOpen                 // not sent: the host's circuit is open (CircuitOpenError)
)

var kindTypes = map[Kind]string{
	KindNetwork: ErrTypeNetwork, KindUnavailable: ErrTypeUnavailable, KindRateLimited: ErrTypeRateLimited,
	KindInFlight: ErrTypeInFlight, KindMismatch: ErrTypeMismatch, KindRejected: ErrTypeRejected,
	KindCircuitOpen: ErrTypeCircuitOpen,
}

// Retryable reports whether the outcome may be retried, with the same key.
func (k Kind) Retryable() bool { return k != KindMismatch && k != KindRejected }

// Error is a classified downstream failure.
type Error struct {
	Kind    Kind
	Method  string
	URL     string
	Status  int    // 0 for network errors
	Code    string // the provider's error code, e.g. "card_declined"
	Message string // the provider's message, or the network error's
	// RetryAfter is the next retry delay: the Retry-After of a 429 or 5xx; for KindCircuitOpen,
	// the time to the circuit's RetryAt and up to as much again, drawn at random so that the
	// attempts refused together do not all come back together.
	RetryAfter time.Duration
	Sent       bool  // false when the request certainly never left this process
	Err        error // the network error, or the *CircuitOpenError, if any
}

func (e *Error) Error() string {
	what := fmt.Sprintf("%s %s", e.Method, e.URL)
	switch e.Kind {
	case KindNetwork:
		if !e.Sent {
			return fmt.Sprintf("%s: not sent: %v; retrying is safe", what, e.Err)
		}
		return fmt.Sprintf("%s: no response: %v; the outcome is unknown, retry with the same key", what, e.Err)
	case KindMismatch:
		return fmt.Sprintf("%s: %d %s: the idempotency key was already used with other parameters; use a new key for a new intent", what, e.Status, e.Message)
	case KindRejected:
		if e.Code == "" {
			return fmt.Sprintf("%s: rejected with %d: %s", what, e.Status, e.Message)
		}
		return fmt.Sprintf("%s: rejected with %d %s: %s", what, e.Status, e.Code, e.Message)
	case KindRateLimited:
		return fmt.Sprintf("%s: rate limited (429); retry after %v with the same key", what, e.RetryAfter)
	case KindInFlight:
		return fmt.Sprintf("%s: 409, a request with the same key is in flight; retry with the same key", what)
	case KindCircuitOpen:
		return fmt.Sprintf("%s: %v", what, e.Err)
	}
	return fmt.Sprintf("%s: %d %s; retry with the same key", what, e.Status, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// NotApplied reports that the request was never sent, so retrying cannot duplicate anything
// (activity.IsNotApplied understands it).
func (e *Error) NotApplied() bool {
	return (e.Kind == KindNetwork || e.Kind == KindCircuitOpen) && !e.Sent
}

// Temporal returns e as a Temporal application error of its kind's type, retryable or not,
// with Retry-After as the next retry delay, and e as its cause.
func (e *Error) Temporal() error {
	return temporal.NewApplicationErrorWithOptions(e.Error(), kindTypes[e.Kind], temporal.ApplicationErrorOptions{
		NonRetryable:   !e.Kind.Retryable(),
		NextRetryDelay: e.RetryAfter,
		Cause:          e,
	})
}

// Check classifies the outcome of an HTTP call: nil for a 2xx or 3xx response, else a Temporal
// application error wrapping an *Error (see Error.Temporal). A response with an error status is
// consumed and closed. Call it with exactly what http.Client.Do returned:
//
//	resp, err := client.Do(req)
//	if err := downstream.Check(req, resp, err); err != nil {
//		return Charge{}, err
//	}
//
// Error bodies in Stripe's shape ({"error": {"type", "code", "message"}}) fill Code and Message;
// a 400 or 422 whose type is "idempotency_error" is a mismatch.
func Check(req *http.Request, resp *http.Response, err error) error {
	if err == nil && resp.StatusCode < 400 {
		return nil
	}
	var noKey *NoKeyError
	if errors.As(err, &noKey) {
		// A bug in the caller, not a passing fault: retrying cannot help.
		return temporal.NewNonRetryableApplicationError(noKey.Error(), ErrTypeNoKey, err)
	}
	var config *ConfigError
	if errors.As(err, &config) {
		return temporal.NewNonRetryableApplicationError(config.Error(), ErrTypeMisconfigured, err)
	}
	e := classify(req, resp, err)
	return e.Temporal()
}

func classify(req *http.Request, resp *http.Response, err error) *Error {
	e := &Error{Method: req.Method, URL: req.URL.Redacted()}
	var open *CircuitOpenError
	if errors.As(err, &open) {
		wait := max(time.Until(open.RetryAt), 0)
		e.Kind, e.Err, e.Message, e.RetryAfter = KindCircuitOpen, open, open.Error(), wait+jitter(wait)
		return e
	}
	if err != nil {
		e.Kind, e.Err, e.Message, e.Sent = KindNetwork, err, err.Error(), sent(err)
		return e
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e.Status = resp.StatusCode
	var envelope struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &envelope) == nil && envelope.Error.Message != "" {
		e.Code, e.Message = envelope.Error.Code, envelope.Error.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "…"
		}
	}
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests:
		e.Kind, e.RetryAfter = KindRateLimited, retryAfter(resp.Header.Get("Retry-After"), time.Now())
	case s == http.StatusConflict:
		e.Kind = KindInFlight
	case (s == http.StatusBadRequest || s == http.StatusUnprocessableEntity) && envelope.Error.Type == "idempotency_error":
		e.Kind = KindMismatch
	case s >= 500:
		e.Kind, e.RetryAfter = KindUnavailable, retryAfter(resp.Header.Get("Retry-After"), time.Now())
	default:
		e.Kind = KindRejected
	}
	return e
}

// sent reports whether a transport error may have happened after the request left: only a
// failure to connect, or a request refused before sending, proves it did not.
func sent(err error) bool {
	var noKey *NoKeyError
	if errors.As(err, &noKey) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

// retryAfter parses a Retry-After header received at now: delay-seconds or an HTTP date. A
// value that is neither, negative, a date in the past, or too far off for a time.Duration is
// 0, the retry policy's own delay.
//
// Nothing here waits for it: the delay goes to Temporal as the attempt's next retry delay, so a
// Retry-After longer than the attempt has left never holds the attempt past its deadline; the
// next attempt is scheduled after it instead.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	const maxSecs = int64(math.MaxInt64 / time.Second)
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 || secs > maxSecs {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.Sub(now) > 0 && t.Before(now.Add(time.Duration(maxSecs)*time.Second)) {
		return t.Sub(now)
	}
	return 0
}

// jitter returns a random duration in [0, d], or 0 when d is not positive.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// As finds the *Error in err's chain (through Temporal application errors too).
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
