package fakepay

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/tempotent/tempotent/downstream"
)

// The ledger: what fakepay has done (charges, refunds, webhook events and their deliveries), the
// responses it stored per idempotency key, and their persistence to Config.StatePath. It is plain
// state: the Server holds it under its mutex, decides what a request asks of it, and turns its
// answers into HTTP.

// state is what survives a restart when StatePath is set.
type state struct {
	// Instance tells this ledger's event IDs from another's (WebhookConfig.EventIDPrefix).
	Instance string            `json:"instance"`
	Seq      int               `json:"seq"`
	Charges  []*charge         `json:"charges"`
	Refunds  []*refund         `json:"refunds"`
	Keys     map[string]*entry `json:"keys"`
	Faults   Faults            `json:"faults"`

	Settling   []settlement  `json:"settling,omitempty"`   // processing charges, in the order made
	Events     []*event      `json:"events,omitempty"`     // every webhook event, in the order created
	Deliveries []*delivery   `json:"deliveries,omitempty"` // pending, in the order queued
	Webhooks   webhookCounts `json:"webhooks"`
}

type charge struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Source      string            `json:"source"`
	Description string            `json:"description,omitempty"`
	Status      string            `json:"status"`
	Refunded    bool              `json:"refunded"`
	Metadata    map[string]string `json:"metadata"`
	Key         string            `json:"idempotency_key"`
}

type refund struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Charge   string `json:"charge"`
	Amount   int64  `json:"amount"`
	Status   string `json:"status"`
	Key      string `json:"idempotency_key"`
	Currency string `json:"currency"`
}

// entry is a stored response.
type entry struct {
	Request string          `json:"request"` // method, path and canonical parameters
	Status  int             `json:"status"`
	Body    json.RawMessage `json:"body"`
	Created time.Time       `json:"created"`
}

// loadState reads the state at path, or starts an empty one when path is "" or no such file
// exists yet. A state without an instance (a new one) gets a random one. The maps are made
// whether or not the file had them, so that a state file written by hand, or by an earlier
// fakepay without webhooks, can be written to.
func loadState(path string) (state, error) {
	var st state
	if path != "" {
		raw, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return state{}, fmt.Errorf("fakepay: read state: %w", err)
		default:
			if err := json.Unmarshal(raw, &st); err != nil {
				return state{}, fmt.Errorf("fakepay: state file %s is not fakepay state: %w", path, err)
			}
		}
	}
	if st.Keys == nil {
		st.Keys = map[string]*entry{}
	}
	if st.Webhooks.Answered == nil {
		st.Webhooks.Answered = map[string]int{}
	}
	if st.Instance == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		st.Instance = hex.EncodeToString(b[:])
	}
	return st, nil
}

// write writes the state to path: to a temporary file, fsynced, then renamed over the old one,
// so a crash leaves the old state or the new one, never half of either.
func (st *state) write(path string) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fakepay-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// recall returns the response stored for key, first forgetting it if it is older than
// retention at now.
func (st *state) recall(key string, now time.Time, retention time.Duration) (*entry, bool) {
	e, ok := st.Keys[key]
	if ok && now.Sub(e.Created) > retention {
		delete(st.Keys, key)
		return nil, false
	}
	return e, ok
}

// remember stores the response to key's first request.
func (st *state) remember(key, request string, status int, body []byte, now time.Time) {
	st.Keys[key] = &entry{Request: request, Status: status, Body: body, Created: now}
}

// refusal is the ledger's answer to a request that it does not apply, in Stripe's terms; the
// server chooses the HTTP status by its kind.
type refusal struct {
	kind               refusalKind
	typ, code, message string
}

type refusalKind int

const (
	refusedInvalid  refusalKind = iota // the request cannot be applied as it is
	refusedDeclined                    // the card was declined
	refusedMissing                     // what the request names does not exist
)

// chargeRequest is a charge's parameters, already checked for presence and form.
type chargeRequest struct {
	Amount                        int64
	Currency, Source, Description string
	Metadata                      map[string]string
}

// charge records a charge made under key, "succeeded" (an asynchronous source's charge is then
// started processing by the server), or refuses it: declined when decline is set or the source
// is Stripe's declining test token.
func (st *state) charge(key string, req chargeRequest, decline bool) (*charge, *refusal) {
	if decline || req.Source == "tok_chargeDeclined" {
		return nil, &refusal{refusedDeclined, "card_error", "card_declined", "Your card was declined."}
	}
	st.Seq++
	c := &charge{
		ID: fmt.Sprintf("ch_%08d", st.Seq), Object: "charge", Amount: req.Amount, Currency: req.Currency,
		Source: req.Source, Description: req.Description, Status: "succeeded", Metadata: req.Metadata, Key: key,
	}
	st.Charges = append(st.Charges, c)
	return c, nil
}

// refund records the refund of the whole charge id under key, and returns it with the charge it
// refunded; or refuses it when the charge does not exist, is refunded already, or has not
// succeeded (still processing, or failed).
func (st *state) refund(key, id string) (*refund, *charge, *refusal) {
	c := st.findCharge(id)
	switch {
	case c == nil:
		return nil, nil, &refusal{refusedMissing, "invalid_request_error", "resource_missing", "No such charge: " + id}
	case c.Refunded:
		return nil, nil, &refusal{refusedInvalid, "invalid_request_error", "charge_already_refunded", "Charge " + c.ID + " has already been refunded."}
	case c.Status == "processing":
		return nil, nil, &refusal{refusedInvalid, "invalid_request_error", "charge_not_settled", "Charge " + c.ID + " is still processing; refund it once it has succeeded."}
	case c.Status == "failed":
		return nil, nil, &refusal{refusedInvalid, "invalid_request_error", "charge_not_refundable", "Charge " + c.ID + " failed; there is nothing to refund."}
	}
	st.Seq++
	c.Refunded = true
	rf := &refund{ID: fmt.Sprintf("re_%08d", st.Seq), Object: "refund", Charge: c.ID, Amount: c.Amount, Currency: c.Currency, Status: "succeeded", Key: key}
	st.Refunds = append(st.Refunds, rf)
	return rf, c, nil
}

func (st *state) findCharge(id string) *charge {
	for _, c := range st.Charges {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// chargesWithMetadata returns the charges whose metadata field is value, in the order made.
func (st *state) chargesWithMetadata(field, value string) []*charge {
	data := []*charge{}
	for _, c := range st.Charges {
		if c.Metadata[field] == value {
			data = append(data, c)
		}
	}
	return data
}

// Ledger is every effect fakepay applied, for tests and the demo's summary.
type Ledger struct {
	Charges []LedgerCharge `json:"charges"`
	Refunds []LedgerRefund `json:"refunds"`
	// ChargesByToken counts charges per tempotent token (metadata), whatever their status: more
	// than one is a duplicate charge of one intent.
	ChargesByToken map[string]int `json:"charges_by_token"`
	// RefundsByCharge counts refunds per charge: more than one is a duplicate refund.
	RefundsByCharge map[string]int `json:"refunds_by_charge"`
	// RequestsByKey counts the POSTs received per idempotency key since this process started,
	// faulted and replayed ones included: how often a caller came back with the same key.
	RequestsByKey map[string]int `json:"requests_by_key"`
	// ConflictsByKey counts the 409s answered per idempotency key since this process started:
	// duplicates that arrived while the key's first request was in flight.
	ConflictsByKey map[string]int `json:"conflicts_by_key"`
	// Webhooks counts the webhook events and their deliveries.
	Webhooks LedgerWebhooks `json:"webhooks"`
}

// LedgerWebhooks counts webhook events and their deliveries. The counts are part of the state,
// so, unlike RequestsByKey, they survive a restart.
type LedgerWebhooks struct {
	// EventsByType counts the events created per type: one per change of a charge.
	EventsByType map[string]int `json:"events_by_type"`
	// Attempts counts the deliveries sent, whatever became of them.
	Attempts int `json:"attempts"`
	// Delivered counts the attempts answered 2xx, those that WebhookFail then treated as lost
	// included: each one the receiver accepted.
	Delivered int `json:"delivered"`
	// DeliveredByEvent counts the 2xx answers per event ID: more than one is a duplicate that
	// the receiver had to absorb.
	DeliveredByEvent map[string]int `json:"delivered_by_event"`
	// Pending counts the deliveries queued or waiting for a retry.
	Pending int `json:"pending"`
	// Abandoned counts the deliveries given up, unanswered, after WebhookConfig.MaxAge.
	Abandoned int `json:"abandoned"`
}

// LedgerCharge is one charge in the ledger.
type LedgerCharge struct {
	ID          string `json:"id"`
	Description string `json:"description,omitempty"`
	Key         string `json:"idempotency_key"`
	Token       string `json:"token"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Status      string `json:"status"` // "succeeded", or "processing" and "failed" for an asynchronous charge
	Refunded    bool   `json:"refunded"`
}

// LedgerRefund is one refund in the ledger.
type LedgerRefund struct {
	ID     string `json:"id"`
	Key    string `json:"idempotency_key"`
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

// RefundsOfToken counts the refunds of the charges made under a tempotent token.
func (l Ledger) RefundsOfToken(token string) int {
	n := 0
	for _, c := range l.Charges {
		if c.Token == token {
			n += l.RefundsByCharge[c.ID]
		}
	}
	return n
}

// ledger returns a copy of what the state records; the counts of this process's requests are the
// server's to add.
func (st *state) ledger() Ledger {
	l := Ledger{Charges: []LedgerCharge{}, Refunds: []LedgerRefund{}, ChargesByToken: map[string]int{}, RefundsByCharge: map[string]int{}}
	for _, c := range st.Charges {
		tok := c.Metadata[downstream.TokenMetadataKey]
		l.Charges = append(l.Charges, LedgerCharge{ID: c.ID, Description: c.Description, Key: c.Key, Token: tok, Amount: c.Amount, Currency: c.Currency,
			Status: c.Status, Refunded: c.Refunded})
		if tok != "" {
			l.ChargesByToken[tok]++
		}
	}
	for _, r := range st.Refunds {
		l.Refunds = append(l.Refunds, LedgerRefund{ID: r.ID, Key: r.Key, Charge: r.Charge, Amount: r.Amount})
		l.RefundsByCharge[r.Charge]++
	}
	l.Webhooks = LedgerWebhooks{EventsByType: map[string]int{}, Attempts: st.Webhooks.Attempts, DeliveredByEvent: maps.Clone(st.Webhooks.Answered),
		Pending: len(st.Deliveries), Abandoned: st.Webhooks.Abandoned}
	for _, e := range st.Events {
		l.Webhooks.EventsByType[e.Type]++
	}
	for _, n := range l.Webhooks.DeliveredByEvent {
		l.Webhooks.Delivered += n
	}
	return l
}
