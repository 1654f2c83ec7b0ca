package fakepay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Client is a downstream.Payments for a fakepay server (or anything that speaks the same
// subset of Stripe's API). Its requests carry the token of the activity's context as their
// Idempotency-Key through downstream.Transport, and its errors are classified by
// downstream.Check, so they cross into Temporal with the downstream package's error types.
type Client struct {
	// BaseURL is the server's address, e.g. "http://127.0.0.1:8420".
	BaseURL string
	// HTTP sends the requests; its Transport must set the idempotency key. Default: an
	// http.Client whose Transport is a downstream.Transport.
	HTTP *http.Client
}

var _ downstream.Payments = (*Client)(nil)

// NewClient returns a Client for the server at baseURL.
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: strings.TrimSuffix(baseURL, "/"), HTTP: &http.Client{Transport: &downstream.Transport{}}}
}

// Charge implements downstream.Payments.
func (c *Client) Charge(ctx context.Context, req downstream.ChargeRequest) (downstream.Charge, error) {
	tok, _ := keys.TokenFrom(ctx) // Transport refuses the request when there is none
	form := url.Values{
		"amount":   {strconv.FormatInt(req.Amount, 10)},
		"currency": {req.Currency},
		"source":   {req.Source},
		"metadata[" + downstream.TokenMetadataKey + "]": {tok.String()},
	}
	if req.Description != "" {
		form.Set("description", req.Description)
	}
	var ch charge
	if err := c.do(ctx, http.MethodPost, "/v1/charges", form, &ch); err != nil {
		return downstream.Charge{}, err
	}
	return ch.public(), nil
}

// Refund implements downstream.Payments.
func (c *Client) Refund(ctx context.Context, chargeToken keys.Token) (downstream.Refund, error) {
	ch, found, err := c.Lookup(ctx, chargeToken)
	if err != nil {
		return downstream.Refund{}, err
	}
	if !found || ch.Status == "failed" {
		// An asynchronous charge that failed moved no money: there is nothing to refund.
		return downstream.Refund{Status: downstream.RefundNoCharge}, nil
	}
	var rf refund
	err = c.do(ctx, http.MethodPost, "/v1/refunds", url.Values{"charge": {ch.ID}}, &rf)
	if e, ok := downstream.As(err); ok && e.Code == "charge_already_refunded" {
		// Refunded under another key: the effect the caller wants is there, once.
		return downstream.Refund{ChargeID: ch.ID, Amount: ch.Amount, Status: "succeeded"}, nil
	}
	if err != nil {
		return downstream.Refund{}, err
	}
	return downstream.Refund{ID: rf.ID, ChargeID: rf.Charge, Amount: rf.Amount, Status: rf.Status}, nil
}

// Lookup implements downstream.Payments through the charge search.
func (c *Client) Lookup(ctx context.Context, token keys.Token) (downstream.Charge, bool, error) {
	q := url.Values{"query": {fmt.Sprintf("metadata['%s']:'%s'", downstream.TokenMetadataKey, token)}}
	var res struct {
		Data []charge `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/charges/search?"+q.Encode(), nil, &res); err != nil {
		return downstream.Charge{}, false, err
	}
	if len(res.Data) == 0 {
		return downstream.Charge{}, false, nil
	}
	return res.Data[0].public(), true, nil
}

// Ledger fetches the server's ledger.
func (c *Client) Ledger(ctx context.Context) (Ledger, error) {
	var l Ledger
	return l, c.do(ctx, http.MethodGet, "/ledger", nil, &l)
}

// ReplayWebhook has the server send the webhook event eventID again: the same ID and body,
// under a fresh signature. Every call sends it once more. An unknown event is a non-retryable
// ErrTypeRejected error with code resource_missing.
func (c *Client) ReplayWebhook(ctx context.Context, eventID string) error {
	_, err := c.replay(ctx, map[string]any{"event": eventID})
	return err
}

// ReplayAllWebhooks has the server send every webhook event it has created again, as
// ReplayWebhook does for one, and returns their IDs.
func (c *Client) ReplayAllWebhooks(ctx context.Context) ([]string, error) {
	return c.replay(ctx, map[string]any{"all": true})
}

func (c *Client) replay(ctx context.Context, what map[string]any) ([]string, error) {
	raw, _ := json.Marshal(what)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/webhooks/replay", bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	// A replay is meant to send again, so it is not deduplicated and needs no token. The key
	// only satisfies downstream.Transport, which refuses an unsafe request without one.
	req.Header.Set(downstream.HeaderDefault, "fakepay-webhook-replay")
	var out struct {
		Replayed []string `json:"replayed"`
	}
	err = c.send(req, &out)
	return out.Replayed, err
}

func (c *Client) do(ctx context.Context, method, path string, form url.Values, out any) error {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return c.send(req, out)
}

// send runs req and decodes its JSON answer into out; a failure is classified by
// downstream.Check.
func (c *Client) send(req *http.Request, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Transport: &downstream.Transport{}}
	}
	resp, err := hc.Do(req)
	if err := downstream.Check(req, resp, err); err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

func (c charge) public() downstream.Charge {
	return downstream.Charge{ID: c.ID, Token: c.Metadata[downstream.TokenMetadataKey], Amount: c.Amount,
		Currency: c.Currency, Status: c.Status, Refunded: c.Refunded, Description: c.Description}
}
