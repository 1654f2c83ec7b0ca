package payment

import (
	"context"
	"fmt"
	"time"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Payout pays a marketplace's sellers their balances in one activity: a batch whose every
// seller is an item with its own receipt (activity.ForEach), so a worker that dies at seller
// 600 of 1,000 leaves a retry that pays the other 400 and nobody twice.
type Payout struct {
	ID      string   `json:"id"`
	Sellers []Seller `json:"sellers"`
	// Faults are fakepay fault specs (fakepay.ParseFaults) sent with every transfer, to show
	// the failure modes: "slow=30ms" makes a batch long enough to kill its worker mid-way.
	Faults string `json:"faults,omitempty"`
	// Gateway chooses where the sellers are paid: "" at the payment provider, which
	// deduplicates on each seller's token; GatewayLegacy at the gateway that does not, where a
	// seller whose transfer may have been sent by an attempt that died is reconciled (asked of
	// the gateway's lookup) instead of paid again.
	Gateway string `json:"gateway,omitempty"`
}

// Seller is one payee of a payout.
type Seller struct {
	ID       string `json:"id"`
	Account  string `json:"account"` // where the money goes
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Note is for the seller's statement. It does not change what is paid, so it is not part
	// of the intent: a retry that words it differently replays the transfer instead of being a
	// payload mismatch.
	Note string `json:"note,omitempty" tempotent:"-"`
}

// PayoutResult is how a payout ended: the transfer made to each seller, by seller ID, and the
// sellers whose transfer was refused (a closed account).
type PayoutResult struct {
	PayoutID  string            `json:"payout_id"`
	Transfers map[string]string `json:"transfers"`
	Refused   map[string]string `json:"refused,omitempty"`
	// Attempt is the attempt of the PayOut activity that finished the payout: more than 1 when
	// an attempt died or failed mid-way and a retry paid the rest.
	Attempt int32 `json:"attempt"`
}

// PayoutDescription is what a seller's transfer is described as at the provider: the payout
// and the seller, so that the provider's ledger shows a seller paid twice by one payout.
func PayoutDescription(payoutID, sellerID string) string {
	return "payout " + payoutID + "/" + sellerID
}

// PayOut returns the activity that transfers every seller's balance at the payment provider
// under the seller's own token, with its receipts in store. A retry — after a crash, a timeout,
// or a heartbeat that is behind — replays the sellers already paid (one statement for all of
// them) and pays the rest. Register it with activity.Options{Batch: true}.
func (a *Activities) PayOut(store *activity.Store) func(context.Context, Payout) (PayoutResult, error) {
	return func(ctx context.Context, p Payout) (PayoutResult, error) { return a.payOut(ctx, store, p) }
}

func (a *Activities) payOut(ctx context.Context, store *activity.Store, p Payout) (PayoutResult, error) {
	payments, opts := a.Payments, activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: SettleTime}
	if p.Gateway == GatewayLegacy {
		payments, opts = a.Gateway, activity.Options{DownstreamSettleTime: SettleTime, Reconcile: downstream.ReconcileCharge(a.GatewayLookup)}
	}
	results, err := activity.ForEach(ctx, store, p.Sellers, activity.Items[Seller]{
		ID: func(s Seller) string { return s.ID },
		// The pass: each seller's receipt records a transfer. A second pass over the sellers
		// (a statement to each) would need a name of its own.
		Operation:   "Transfer",
		Concurrency: 8,
		Options:     opts,
	}, func(ctx context.Context, s Seller) (downstream.Charge, error) {
		return payments.Charge(withFaults(ctx, p.Faults), downstream.ChargeRequest{Amount: s.Amount, Currency: s.Currency, Source: s.Account,
			Description: PayoutDescription(p.ID, s.ID)})
	})
	if err != nil {
		return PayoutResult{}, err // some sellers are left to the retry
	}
	out := PayoutResult{PayoutID: p.ID, Transfers: make(map[string]string, len(results)), Attempt: sdkactivity.GetInfo(ctx).Attempt}
	for _, r := range results {
		if r.Err != nil {
			if out.Refused == nil {
				out.Refused = map[string]string{}
			}
			out.Refused[r.ID] = r.Err.Error()
			continue
		}
		out.Transfers[r.ID] = r.Out.ID
	}
	return out, nil
}

// PayoutWorkflow runs a payout: one PayOut activity, retried until every seller is settled.
// Its heartbeat timeout lets a dead worker's attempt be noticed in seconds, not at its
// start-to-close timeout.
func PayoutWorkflow(ctx workflow.Context, p Payout) (PayoutResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    5 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 2 * time.Second},
	})
	ctx = keys.WithID(keys.WithStep(ctx, "payout"), "payout/"+p.ID)
	var r PayoutResult
	if err := workflow.ExecuteActivity(ctx, "PayOut", p).Get(ctx, &r); err != nil {
		return PayoutResult{}, fmt.Errorf("payout %s: %w", p.ID, err)
	}
	return r, nil
}
