package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Headers that HTTPPublisher adds to every request.
const (
	HeaderTopic   = "Tempotent-Topic"
	HeaderAttempt = "Tempotent-Attempt"
)

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
type HTTPPublisher struct {
	// URL receives every message, unless Route is set.
	URL string
	// Route, when set, gives each message's URL; an error from it is permanent.
	Route func(Delivery) (string, error)
	// Client sends the requests; its Transport (default http.DefaultTransport) is wrapped in a
	// downstream.Transport, and its CheckRedirect is replaced by one that follows nothing.
	// Default: a client without a timeout of its own (the dispatcher's PublishTimeout bounds
	// each call).
	Client *http.Client
	// Header names the idempotency header; default downstream.HeaderDefault (Idempotency-Key).
	Header string
}

var _ Publisher = (*HTTPPublisher)(nil)

// Publish implements Publisher.
func (p *HTTPPublisher) Publish(ctx context.Context, d Delivery) error {
	url := p.URL
	if p.Route != nil {
		var err error
		if url, err = p.Route(d); err != nil {
			return Permanent(err)
		}
	}
	if url == "" {
		return Permanent(errors.New("outbox: HTTPPublisher has no URL for topic " + strconv.Quote(d.Topic)))
	}
	req, err := http.NewRequestWithContext(keys.WithToken(ctx, keys.Token(d.ID)), http.MethodPost, url, bytes.NewReader(d.Payload))
	if err != nil {
		return Permanent(err)
	}
	for name, value := range d.Headers {
		req.Header.Set(name, value)
	}
	req.Header.Set(HeaderTopic, d.Topic)
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.Attempt))
	client := http.Client{Transport: &downstream.Transport{Header: p.Header}}
	if p.Client != nil {
		client = *p.Client
		client.Transport = &downstream.Transport{Base: p.Client.Transport, Header: p.Header}
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err := downstream.Check(req, resp, err); err != nil {
		if e, ok := downstream.As(err); ok && !e.Kind.Retryable() {
			return Permanent(err)
		}
		return err
	}
	defer resp.Body.Close()
	// downstream.Check takes any status below 400 as success; only a 2xx delivers.
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("outbox: POST %s answered %s, redirecting to %q: the message was not delivered; give the publisher the URL that accepts it",
			req.URL.Redacted(), resp.Status, resp.Header.Get("Location"))
	}
	return nil
}
