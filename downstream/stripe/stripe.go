// Package stripe is a downstream.Payments over the Stripe Go client (stripe-go v84) whose
// idempotency key is the running intent's token.
//
// stripe-go mints a random idempotency key per request unless told otherwise, and retries with
// it; a Temporal retry of the activity is a new request, so a plain Stripe call retried by
// Temporal is a new charge. This adapter sets every state-changing request's key from
// keys.TokenFrom (refusing to send one without), turns off stripe-go's own retries so that
// Temporal's retry policy is the only one, and maps Stripe's errors to the downstream package's
// Temporal error types: card errors are non-retryable rejections (recorded and replayed by the
// receipt), idempotency errors are mismatches (400) or in-flight duplicates (409), API and
// connection errors are retryable with the same key.
//
// It is a module of its own so that the toolkit's go.mod does not carry stripe-go.
//
//	payments := stripe.New("sk_live_…", nil)
//	ch, err := payments.Charge(ctx, downstream.ChargeRequest{Amount: 4200, Currency: "eur", Source: "tok_visa"})
package stripe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Config configures Payments. The zero Config talks to api.stripe.com with http.DefaultClient.
type Config struct {
	// URL replaces Stripe's API address, for stripe-mock or fakepay.
	URL string
	// HTTPClient sends the requests.
	HTTPClient *http.Client
}

// Payments is a downstream.Payments on Stripe.
type Payments struct {
	client *stripego.Client
}

var _ downstream.Payments = (*Payments)(nil)

// New returns Payments that authenticate with the secret key.
func New(secretKey string, cfg *Config) *Payments {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	noRetries := int64(0) // Temporal retries, with the same key
	bc := &stripego.BackendConfig{HTTPClient: c.HTTPClient, MaxNetworkRetries: &noRetries, LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}}
	if c.URL != "" {
		bc.URL = &c.URL
	}
	return &Payments{client: stripego.NewClient(secretKey, stripego.WithBackends(stripego.NewBackendsWithConfig(bc)))}
}

// Charge implements downstream.Payments. The token is also stored in the charge's metadata, so
// Lookup can find it.
func (p *Payments) Charge(ctx context.Context, req downstream.ChargeRequest) (downstream.Charge, error) {
	tok, err := token(ctx, "/v1/charges")
	if err != nil {
		return downstream.Charge{}, err
	}
	params := &stripego.ChargeCreateParams{Amount: stripego.Int64(req.Amount), Currency: stripego.String(req.Currency)}
	if req.Description != "" {
		params.Description = stripego.String(req.Description)
	}
	if err := params.SetSource(req.Source); err != nil {
		return downstream.Charge{}, err
	}
	params.AddMetadata(downstream.TokenMetadataKey, tok.String())
	params.SetIdempotencyKey(tok.String())
	ch, err := p.client.V1Charges.Create(ctx, params)
	if err != nil {
		return downstream.Charge{}, classify(http.MethodPost, "/v1/charges", err)
	}
	return public(ch), nil
}

// Refund implements downstream.Payments: it finds the charge by its token and refunds it under
// the token in ctx.
func (p *Payments) Refund(ctx context.Context, chargeToken keys.Token) (downstream.Refund, error) {
	tok, err := token(ctx, "/v1/refunds")
	if err != nil {
		return downstream.Refund{}, err
	}
	ch, found, err := p.Lookup(ctx, chargeToken)
	if err != nil {
		return downstream.Refund{}, err
	}
	if !found {
		return downstream.Refund{Status: downstream.RefundNoCharge}, nil
	}
	params := &stripego.RefundCreateParams{Charge: stripego.String(ch.ID)}
	params.SetIdempotencyKey(tok.String())
	rf, err := p.client.V1Refunds.Create(ctx, params)
	var se *stripego.Error
	if errors.As(err, &se) && se.Code == stripego.ErrorCodeChargeAlreadyRefunded {
		// Refunded under another key: the effect the caller wants is there, once.
		return downstream.Refund{ChargeID: ch.ID, Amount: ch.Amount, Status: "succeeded"}, nil
	}
	if err != nil {
		return downstream.Refund{}, classify(http.MethodPost, "/v1/refunds", err)
	}
	out := downstream.Refund{ID: rf.ID, Amount: rf.Amount, Status: string(rf.Status)}
	if rf.Charge != nil {
		out.ChargeID = rf.Charge.ID
	}
	return out, nil
}

// Lookup implements downstream.Payments through Stripe's charge search on the token metadata.
// Stripe's search index lags writes by up to a minute; the adapter therefore refunds only what it
// can find, and a compensation retried by Temporal finds a charge made moments earlier.
func (p *Payments) Lookup(ctx context.Context, token keys.Token) (downstream.Charge, bool, error) {
	params := &stripego.ChargeSearchParams{SearchParams: stripego.SearchParams{
		Query: fmt.Sprintf("metadata['%s']:'%s'", downstream.TokenMetadataKey, token),
		Limit: stripego.Int64(1),
	}}
	for ch, err := range p.client.V1Charges.Search(ctx, params) {
		if err != nil {
			return downstream.Charge{}, false, classify(http.MethodGet, "/v1/charges/search", err)
		}
		return public(ch), true, nil
	}
	return downstream.Charge{}, false, nil
}

func token(ctx context.Context, path string) (keys.Token, error) {
	tok, ok := keys.TokenFrom(ctx)
	if !ok {
		return "", downstream.Check(&http.Request{Method: http.MethodPost}, nil,
			&downstream.NoKeyError{Method: http.MethodPost, URL: path, Header: downstream.HeaderDefault})
	}
	return tok, nil
}

// classify maps a stripe-go error to the downstream package's Temporal errors.
func classify(method, path string, err error) error {
	e := &downstream.Error{Method: method, URL: path, Err: err, Message: err.Error()}
	var open *downstream.CircuitOpenError
	if errors.As(err, &open) {
		// A breaker in the HTTP client (downstream.Transport) refused the request: it was never
		// sent, so it is not an unknown outcome. Come back once the open period is over.
		e.Kind, e.Err, e.Message, e.RetryAfter = downstream.KindCircuitOpen, open, open.Error(), max(time.Until(open.RetryAt), 0)
		return e.Temporal()
	}
	var se *stripego.Error
	if !errors.As(err, &se) {
		var op *net.OpError
		e.Kind, e.Sent = downstream.KindNetwork, !(errors.As(err, &op) && op.Op == "dial")
		return e.Temporal()
	}
	e.Status, e.Code, e.Message = se.HTTPStatusCode, string(se.Code), se.Msg
	if se.DeclineCode != "" {
		e.Code = string(se.DeclineCode)
	}
	switch {
	case se.HTTPStatusCode == http.StatusTooManyRequests:
		e.Kind = downstream.KindRateLimited
	case se.Type == stripego.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusConflict:
		e.Kind = downstream.KindInFlight
	case se.Type == stripego.ErrorTypeIdempotency:
		e.Kind = downstream.KindMismatch
	case se.HTTPStatusCode >= 500 || se.Type == stripego.ErrorTypeAPI:
		e.Kind = downstream.KindUnavailable
	default: // card errors, invalid requests
		e.Kind = downstream.KindRejected
	}
	return e.Temporal()
}

func public(ch *stripego.Charge) downstream.Charge {
	return downstream.Charge{ID: ch.ID, Token: ch.Metadata[downstream.TokenMetadataKey], Amount: ch.Amount,
		Currency: string(ch.Currency), Status: string(ch.Status), Refunded: ch.Refunded, Description: ch.Description}
}
