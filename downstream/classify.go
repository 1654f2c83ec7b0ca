package downstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

var kindTypes = map[Kind]string{
	KindNetwork: ErrTypeNetwork, KindUnavailable: ErrTypeUnavailable, KindRateLimited: ErrTypeRateLimited,
	KindInFlight: ErrTypeInFlight, KindMismatch: ErrTypeMismatch, KindRejected: ErrTypeRejected,
}

// Retryable reports whether the outcome may be retried, with the same key.
func (k Kind) Retryable() bool { return k != KindMismatch && k != KindRejected }

// Error is a classified downstream failure.
type Error struct {
	Kind       Kind
	Method     string
	URL        string
	Status     int           // 0 for network errors
	Code       string        // the provider's error code, e.g. "card_declined"
	Message    string        // the provider's message, or the network error's
	RetryAfter time.Duration // from Retry-After on 429 and 503
	Sent       bool          // false when the request certainly never left this process
	Err        error         // the network error, if any
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
		return fmt.Sprintf("%s: rejected with %d %s: %s", what, e.Status, e.Code, e.Message)
	case KindRateLimited:
		return fmt.Sprintf("%s: rate limited (429); retry after %v with the same key", what, e.RetryAfter)
	case KindInFlight:
		return fmt.Sprintf("%s: 409, a request with the same key is in flight; retry with the same key", what)
	}
	return fmt.Sprintf("%s: %d %s; retry with the same key", what, e.Status, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// NotApplied reports that the request was never sent, so retrying cannot duplicate anything
// (activity.IsNotApplied understands it).
func (e *Error) NotApplied() bool { return e.Kind == KindNetwork && !e.Sent }

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
	e := classify(req, resp, err)
	return e.Temporal()
}

func classify(req *http.Request, resp *http.Response, err error) *Error {
	e := &Error{Method: req.Method, URL: req.URL.Redacted()}
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
		e.Kind, e.RetryAfter = KindRateLimited, retryAfter(resp.Header.Get("Retry-After"))
	case s == http.StatusConflict:
		e.Kind = KindInFlight
	case (s == http.StatusBadRequest || s == http.StatusUnprocessableEntity) && envelope.Error.Type == "idempotency_error":
		e.Kind = KindMismatch
	case s >= 500:
		e.Kind, e.RetryAfter = KindUnavailable, retryAfter(resp.Header.Get("Retry-After"))
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

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// As finds the *Error in err's chain (through Temporal application errors too).
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
