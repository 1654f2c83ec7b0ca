package outbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Headers that HTTPPublisher adds to every request.
const (
	HeaderTopic   = "Tempotent-Topic"
	HeaderAttempt = "Tempotent-Attempt"
)

// Headers that HTTPPublisher adds when HTTPPublisher.SigningSecrets is set, as the Standard
// Webhooks specification names them (https://www.standardwebhooks.com/).
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// Limits on what HTTPPublisher takes from a receiver.
const (
	// maxResponseBytes bounds what is read of a response body: a 2xx's is read up to it and
	// discarded (so that the connection can be reused), an error's is read up to it for its
	// message. Beyond it the body is closed unread; a receiver cannot make the dispatcher buffer
	// more.
	maxResponseBytes = 64 << 10
	// maxErrorBytes bounds the message of an error that Publish returns, which the dispatcher
	// stores with the message: what a receiver answers is not ours to store whole.
	maxErrorBytes = 512
)

// ConfigError is the error of HTTPPublisher.Validate, and of NewDispatcher given such a
// publisher, for a setting that cannot work: Field names it, and Problem says what is wrong and
// what it must be.
type ConfigError struct {
	Field, Problem string
}

func (e *ConfigError) Error() string { return "outbox." + e.Field + " " + e.Problem }

// HTTPPublisher POSTs each message's payload, with its headers, to a URL, the message ID in the
// idempotency header: a receiver that deduplicates on it (Stripe's contract, or an inbox) gets a
// repeated delivery as one. Requests go through downstream.Transport, so net/http never sends
// one twice on its own, and outcomes are classified by downstream.Check: a 2xx is delivered, a
// 4xx other than 408, 409 and 429 is permanent (the message is parked as dead), anything else is
// retried.
//
// Redirects are not followed: net/http would follow a 301, 302 or 303 with a GET without the
// body, and the answer to that GET says nothing about the message. A 3xx is a failed attempt,
// retried like a 5xx, whose error names the status and the Location it pointed to: give the
// publisher the final URL.
//
// With SigningSecrets, every request is signed as the Standard Webhooks specification says, so
// that any of its verifiers (webhook.StandardWebhooks among them) can check it came from here:
// webhook-id is the message ID, webhook-timestamp the time of this attempt in unix seconds, and
// webhook-signature one "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, space
// separated. A message whose ID contains '.' cannot be signed unambiguously (the signed content
// could be split another way) and is parked as dead.
//
// A receiver's answer is read no further than 64 KiB, and an error's message is cut short and
// has its control characters escaped before the dispatcher stores it.
//
// The zero value is not usable: set URL or Route. Validate reports the settings that cannot
// work; NewDispatcher calls it and refuses the publisher, and so does Publish, whose error is
// then Permanent.
type HTTPPublisher struct {
	// URL receives every message, unless Route is set: an absolute http or https URL.
	URL string
	// Route, when set, gives each message's URL; an error from it, or a URL that is not an
	// absolute http or https URL, is permanent.
	Route func(Delivery) (string, error)
	// Client sends the requests; its Transport (default http.DefaultTransport) is wrapped in a
	// downstream.Transport, and its CheckRedirect is replaced by one that follows nothing.
	// Default: a client without a timeout of its own (the dispatcher's PublishTimeout bounds
	// each call).
	Client *http.Client
	// Header names the idempotency header; default downstream.HeaderDefault (Idempotency-Key).
	Header string
	// SigningSecrets, when set, sign every request (see HTTPPublisher): each is a Standard
	// Webhooks secret, "whsec_<base64>" (the prefix optional), of 24 to 64 random bytes as the
	// specification asks. Give the new and the old one while rotating: the receiver accepts
	// either signature. Empty: requests are not signed.
	SigningSecrets []string
	// Now gives the signed timestamp. Default time.Now.
	Now func() time.Time
	// Breaker is the circuit breaker of the publisher's downstream.Transport, per receiving
	// host: after a run of failures (5xx, 429, no answer) the publisher stops calling that host
	// for a while, and each message it would have sent fails retryably with a
	// *downstream.CircuitOpenError, so a receiver that is down is not called for every message
	// of the backlog. Off unless Breaker.Enabled. A message refused by an open circuit counts as
	// an attempt, like any failure: give MaxAttempts room for the open periods.
	Breaker downstream.BreakerConfig

	// once builds client on the first Publish: one Transport, and so one breaker, for every
	// message this publisher sends. The settings above are read then; change none of them after.
	once   sync.Once
	client *http.Client
}

var _ Publisher = (*HTTPPublisher)(nil)

// Validate reports the first setting of p that cannot work, as a *ConfigError: neither URL nor
// Route, a URL that is not an absolute http or https URL, a signing secret that is empty, has
// white space around it, is an asymmetric key, or is not base64 after its "whsec_" prefix.
func (p *HTTPPublisher) Validate() error {
	if p.Route == nil {
		if p.URL == "" {
			return &ConfigError{Field: "HTTPPublisher.URL", Problem: "is empty and Route is nil; give the receiver's URL"}
		}
		if err := checkURL(p.URL); err != nil {
			return &ConfigError{Field: "HTTPPublisher.URL", Problem: err.Error()}
		}
	}
	if _, err := p.keys(); err != nil {
		return err
	}
	if err := (&downstream.Transport{Breaker: p.Breaker}).Validate(); err != nil {
		return &ConfigError{Field: "HTTPPublisher.Breaker", Problem: err.Error()}
	}
	return nil
}

// httpClient returns the client every Publish sends with: p.Client's settings (or a client
// without a timeout of its own), its Transport wrapped once in a downstream.Transport carrying
// p.Breaker, and redirects not followed.
func (p *HTTPPublisher) httpClient() *http.Client {
	p.once.Do(func() {
		c := http.Client{}
		if p.Client != nil {
			c = *p.Client
		}
		c.Transport = &downstream.Transport{Base: c.Transport, Header: p.Header, Breaker: p.Breaker}
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		p.client = &c
	})
	return p.client
}

// keys decodes SigningSecrets.
func (p *HTTPPublisher) keys() ([][]byte, error) {
	keys := make([][]byte, 0, len(p.SigningSecrets))
	for i, secret := range p.SigningSecrets {
		key, err := decodeSigningSecret(secret)
		if err != nil {
			return nil, &ConfigError{Field: fmt.Sprintf("HTTPPublisher.SigningSecrets[%d]", i), Problem: err.Error()}
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// decodeSigningSecret returns the key bytes of a Standard Webhooks secret, "whsec_<base64>".
func decodeSigningSecret(secret string) ([]byte, error) {
	switch {
	case secret == "":
		return nil, errors.New("is empty")
	case strings.TrimSpace(secret) != secret:
		return nil, errors.New("has white space around it; a secret read from a file or the environment often ends in a newline: trim it")
	case strings.HasPrefix(secret, "whsk_") || strings.HasPrefix(secret, "whpk_"):
		return nil, errors.New("is an asymmetric (ed25519) key; HTTPPublisher signs with symmetric whsec_ secrets only")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("is not base64 after its whsec_ prefix (%v); give it as whsec_<standard base64 of the key bytes>", err)
	case len(key) == 0:
		return nil, errors.New("holds no key bytes after its whsec_ prefix")
	}
	return key, nil
}

// checkURL refuses what net/http would send nowhere useful: not absolute, not http or https,
// no host.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%s does not parse: %v", clean(raw), err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%s has scheme %q; want http or https", u.Redacted(), u.Scheme)
	case u.Host == "":
		return fmt.Errorf("%s has no host; want an absolute URL such as https://example.com/webhooks", u.Redacted())
	}
	return nil
}

// Publish implements Publisher.
func (p *HTTPPublisher) Publish(ctx context.Context, d Delivery) error {
	if err := p.Validate(); err != nil {
		return Permanent(err)
	}
	target := p.URL
	if p.Route != nil {
		var err error
		if target, err = p.Route(d); err != nil {
			return Permanent(err)
		}
		if target == "" {
			return Permanent(errors.New("outbox: HTTPPublisher.Route gave no URL for topic " + strconv.Quote(d.Topic)))
		}
		if err := checkURL(target); err != nil {
			return Permanent(fmt.Errorf("outbox: HTTPPublisher.Route gave a URL that cannot work for topic %q: %w", d.Topic, err))
		}
	}
	req, err := http.NewRequestWithContext(keys.WithToken(ctx, keys.Token(d.ID)), http.MethodPost, target, bytes.NewReader(d.Payload))
	if err != nil {
		return Permanent(err)
	}
	for name, value := range d.Headers {
		req.Header.Set(name, value)
	}
	req.Header.Set(HeaderTopic, d.Topic)
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.Attempt))
	if err := p.sign(req.Header, d); err != nil {
		return Permanent(err)
	}
	resp, err := p.httpClient().Do(req)
	// downstream.Check reads an error's body up to 64 KiB for its message, and closes it.
	if err := downstream.Check(req, resp, err); err != nil {
		if e, ok := downstream.As(err); ok && !e.Kind.Retryable() {
			return Permanent(shorten(err))
		}
		return shorten(err)
	}
	defer resp.Body.Close()
	// Read what a well-behaved receiver sends, so that the connection goes back to the pool; a
	// longer body is closed unread (its connection is dropped rather than drained forever).
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	// downstream.Check takes any status below 400 as success; only a 2xx delivers.
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("outbox: POST %s answered %s, redirecting to %s: the message was not delivered; give the publisher the URL that accepts it",
			req.URL.Redacted(), clean(resp.Status), strconv.Quote(clean(resp.Header.Get("Location"))))
	}
	return nil
}

// sign sets the Standard Webhooks headers of d on h, when SigningSecrets is set. They are set
// after the message's own headers, so that a message cannot carry a signature of its own.
func (p *HTTPPublisher) sign(h http.Header, d Delivery) error {
	if len(p.SigningSecrets) == 0 {
		return nil
	}
	if strings.Contains(d.ID, ".") {
		return fmt.Errorf("outbox: message %q cannot be signed: its ID contains '.', and the Standard Webhooks signature covers \"id.timestamp.body\", which another split of the same bytes would also match; put it with an ID without '.'", d.ID)
	}
	keys, err := p.keys()
	if err != nil {
		return err
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	sigs := make([]string, len(keys))
	for i, key := range keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(d.ID))
		m.Write([]byte{'.'})
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(d.Payload)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	h.Set(HeaderWebhookID, d.ID)
	h.Set(HeaderWebhookTimestamp, ts)
	h.Set(HeaderWebhookSignature, strings.Join(sigs, " "))
	return nil
}

// shortError is an error whose message is cut short and escaped, and which still unwraps to
// the error it stands for (errors.As finds a *downstream.Error through it).
type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }

// shorten returns err with its message cleaned, or err itself when the message is already clean.
// A downstream error's own message is used, without the Temporal error that wraps it and repeats
// it as its cause.
func shorten(err error) error {
	msg := err.Error()
	if e, ok := downstream.As(err); ok {
		msg = e.Error()
	}
	if c := clean(msg); c != msg || c != err.Error() {
		return &shortError{msg: c, err: err}
	}
	return err
}

// clean escapes s's control characters and invalid bytes, Go-style ("\n", "\x00"), and cuts it
// to at most maxErrorBytes, marking the cut with "…".
func clean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		piece := s[i : i+size]
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			piece = q[1 : len(q)-1]
		}
		if b.Len()+len(piece) > maxErrorBytes {
			b.WriteString("…")
			break
		}
		b.WriteString(piece)
		i += size
	}
	return b.String()
}
