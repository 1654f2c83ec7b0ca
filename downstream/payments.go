package downstream

import (
	"context"

	"github.com/tempotent/tempotent/keys"
)

// Payments is a payment provider as a saga needs it. Every call that changes state is made under
// the idempotency token in its context (keys.TokenFrom): the same token is the same request, so
// a retry of a charge is never a second charge.
type Payments interface {
	// Charge charges req under the token in ctx. Calling it again with the same token returns
	// the same charge; with the same token and other parameters it fails with a non-retryable
	// ErrTypeMismatch error. A declined card is a non-retryable ErrTypeRejected error.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)
	// Refund refunds, in full and once, the charge made under chargeToken, under the token in
	// ctx. Refunding a charge that does not exist (the forward charge never happened) succeeds
	// with Status RefundNoCharge; refunding one that was already refunded returns that refund.
	Refund(ctx context.Context, chargeToken keys.Token) (Refund, error)
	// Lookup returns the charge made under token, and false when there is none.
	Lookup(ctx context.Context, token keys.Token) (Charge, bool, error)
}

// ChargeRequest is what to charge.
type ChargeRequest struct {
	Amount      int64  `json:"amount"`   // in the currency's minor unit (cents)
	Currency    string `json:"currency"` // ISO 4217, lower case
	Source      string `json:"source"`   // card or payment method
	Description string `json:"description,omitempty"`
}

// Charge is a charge at the provider.
type Charge struct {
	ID          string `json:"id"`
	Token       string `json:"token"` // the idempotency token it was made under
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Status      string `json:"status"` // "succeeded"; "processing" while an asynchronous charge awaits confirmation, then "succeeded" or "failed"
	Refunded    bool   `json:"refunded"`
	Description string `json:"description,omitempty"`
}

// Refund statuses beside the provider's own ("succeeded").
const (
	// RefundNoCharge: there was no charge under the token, so there was nothing to refund.
	RefundNoCharge = "no_charge"
)

// Refund is a refund at the provider.
type Refund struct {
	ID       string `json:"id"`
	ChargeID string `json:"charge_id"`
	Amount   int64  `json:"amount"`
	Status   string `json:"status"`
}

// TokenMetadataKey is the metadata field under which implementations store a charge's token,
// so that Lookup can find it through the provider's search.
const TokenMetadataKey = "tempotent_token"

// ReconcileCharge is a ready reconcile function (activity.Options.Reconcile) for an activity
// that charges through p and returns the downstream.Charge that p.Charge returned: after an
// attempt that may have charged ended without recording its outcome, the receipt asks p.Lookup
// for the charge made under the token instead of guessing. A charge found is recorded as the
// activity's result (an asynchronous one as "processing", as its own call would have returned
// it); none found, once the downstream's settle time has passed, lets the next attempt charge;
// an error (the lookup is down, or refuses the credentials) leaves the outcome unknown and the
// attempt retries. It works with every Payments: fakepay's client and the Stripe adapter.
//
// Give it the client of the provider's search or reporting API, which may differ from the
// one that charges (a gateway that does not deduplicate often has a separate reporting service).
func ReconcileCharge(p Payments) func(ctx context.Context, token keys.Token) (any, bool, error) {
	return func(ctx context.Context, token keys.Token) (any, bool, error) {
		ch, found, err := p.Lookup(ctx, token)
		if err != nil || !found {
			return nil, false, err
		}
		return ch, true, nil
	}
}
