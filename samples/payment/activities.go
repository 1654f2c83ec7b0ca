package payment

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/outbox"
)

// Activities are the sample's activities. Payments is the payment provider; Carrier is the
// shipping company's API, which in the sample is a second fakepay: a shipment is a "charge"
// of the parcel's units, a cancellation its refund, with the same idempotency contract.
//
// Gateway is an older payment gateway that, unlike Payments, does not deduplicate: it ignores
// idempotency keys, so a request sent twice charges twice. LegacyCharge charges there, and
// after an attempt that may have charged, its receipt asks GatewayLookup (the gateway's
// reporting API, often a service of its own with its own credentials) what happened instead of
// charging again.
type Activities struct {
	// Outbox receives the reservation messages (ReserveInventory, ReleaseInventory).
	Outbox        *outbox.Outbox
	Payments      downstream.Payments
	Carrier       downstream.Payments
	Gateway       downstream.Payments
	GatewayLookup downstream.Payments
}

// NewActivities returns the activities, putting their messages in out, for a payment provider,
// a carrier and a gateway lookup that speak fakepay's API at the given addresses; an empty
// lookupURL looks up at the payment provider. The gateway is the payment provider's fakepay asked to ignore keys (fakepay's
// ignore_keys). Requests carry each order's fault specs.
func NewActivities(out *outbox.Outbox, paymentsURL, carrierURL, lookupURL string) *Activities {
	client := func(url string, faults faultTransport) *fakepay.Client {
		c := fakepay.NewClient(url)
		c.HTTP = &http.Client{Transport: &downstream.Transport{Base: faults}}
		return c
	}
	return &Activities{
		Outbox:        out,
		Payments:      client(paymentsURL, faultTransport{}),
		Carrier:       client(carrierURL, faultTransport{}),
		Gateway:       client(paymentsURL, faultTransport{always: "ignore_keys"}),
		GatewayLookup: fakepay.NewClient(cmp.Or(lookupURL, paymentsURL)),
	}
}

// Charge charges the order's card under the step's token.
func (a *Activities) Charge(ctx context.Context, o Order) (downstream.Charge, error) {
	return a.Payments.Charge(withFaults(ctx, o.ChargeFaults), chargeRequest(o))
}

// LegacyCharge charges the order's card at the gateway, which does not deduplicate. The receipt
// makes sure it is called once per intent; when an attempt that may have charged ended without
// recording the outcome (its worker died), the next one does not call again: the receipt asks
// the gateway's lookup (Options.Reconcile, downstream.ReconcileCharge) and records what it says
// happened. An error of the lookup (it is down, or refuses us) leaves the outcome unknown: the
// receipt keeps saying that a charge may have happened, and the attempt fails retryably to ask
// again.
func (a *Activities) LegacyCharge(ctx context.Context, o Order) (downstream.Charge, error) {
	return a.Gateway.Charge(withFaults(ctx, o.ChargeFaults), chargeRequest(o))
}

func chargeRequest(o Order) downstream.ChargeRequest {
	return downstream.ChargeRequest{Amount: o.Amount, Currency: o.Currency, Source: o.Card, Description: o.ID}
}

// Refund refunds the charge made under the forward step's token: a no-op when the charge never
// happened.
func (a *Activities) Refund(ctx context.Context, o Order) (downstream.Refund, error) {
	fwd, ok := keys.CompensatesFrom(ctx)
	if !ok {
		return downstream.Refund{}, errors.New("Refund must run as the compensation of a saga step")
	}
	r, err := a.Payments.Refund(ctx, fwd)
	failpoint.Hit(failpoint.InCompensation)
	if err == nil && r.Status == downstream.RefundNoCharge {
		// "No charge" is final only once the charge can no longer land: the provider may
		// still be processing the last charge attempt's request.
		err = activity.ForwardSettled(ctx)
	}
	return r, err
}

// CreateShipment books the parcel with the carrier. The carrier refuses the address "nowhere".
func (a *Activities) CreateShipment(ctx context.Context, o Order) (downstream.Charge, error) {
	source := "tok_visa"
	if o.Address == "nowhere" {
		source = "tok_chargeDeclined" // the carrier's refusal, in fakepay's terms
	}
	return a.Carrier.Charge(withFaults(ctx, o.ShipmentFaults), downstream.ChargeRequest{
		Amount: int64(o.Units), Currency: "pcs", Source: source, Description: o.ID,
	})
}

// CancelShipment cancels the shipment booked under the forward step's token, if there is one.
func (a *Activities) CancelShipment(ctx context.Context, o Order) (downstream.Refund, error) {
	fwd, ok := keys.CompensatesFrom(ctx)
	if !ok {
		return downstream.Refund{}, errors.New("CancelShipment must run as the compensation of a saga step")
	}
	r, err := a.Carrier.Refund(ctx, fwd)
	if err == nil && r.Status == downstream.RefundNoCharge {
		err = activity.ForwardSettled(ctx) // as in Refund: the booking may still land
	}
	return r, err
}

// SettleTime is how long after a charge or booking attempt ended the sample's providers may
// still apply it (fakepay holds a "slow" request that long at most): until then a compensation
// that finds nothing to undo is retried (activity.ForwardSettled).
const SettleTime = 15 * time.Second

// Register registers the sample's workflows and activities on w, each activity once, with what
// its downstream guarantees: the provider and the carrier deduplicate on the token; the gateway
// does not, so LegacyCharge reconciles instead. PayOut is a batch: each seller has its own
// receipt (activity.ForEach), so a retry of the batch is safe. The inventory and order activities write to
// Postgres in their receipt's transaction (activity.RegisterTx).
func Register(w worker.Worker, a *Activities, store *activity.Store) error {
	if a.Outbox == nil {
		return errors.New("payment.Register: Activities.Outbox is nil; set it to the worker's outbox (worker.Env.Outbox)")
	}
	w.RegisterWorkflowWithOptions(PaymentSaga, workflow.RegisterOptions{Name: "PaymentSaga"})
	w.RegisterWorkflowWithOptions(QuickCharge, workflow.RegisterOptions{Name: "QuickCharge"})
	w.RegisterWorkflowWithOptions(PayoutWorkflow, workflow.RegisterOptions{Name: "PayoutWorkflow"})
	dedup := activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: SettleTime}
	return errors.Join(
		activity.Register(w, store, "Charge", a.Charge, dedup),
		activity.Register(w, store, "LegacyCharge", a.LegacyCharge, activity.Options{DownstreamSettleTime: SettleTime, Reconcile: downstream.ReconcileCharge(a.GatewayLookup)}),
		activity.Register(w, store, "Refund", a.Refund, dedup),
		activity.Register(w, store, "CreateShipment", a.CreateShipment, dedup),
		activity.Register(w, store, "CancelShipment", a.CancelShipment, dedup),
		activity.Register(w, store, "PayOut", a.PayOut(store), activity.Options{Batch: true}),
		activity.RegisterTx(w, store, "ReserveInventory", a.reserve, activity.Options{}),
		activity.RegisterTx(w, store, "ReleaseInventory", a.release, activity.Options{DownstreamSettleTime: SettleTime}),
		activity.RegisterTx(w, store, "ConfirmOrder", confirm, activity.Options{}),
	)
}

type faultsKey struct{}

func withFaults(ctx context.Context, spec string) context.Context {
	if spec == "" {
		return ctx
	}
	return context.WithValue(ctx, faultsKey{}, spec)
}

// faultTransport sends the order's fault spec to fakepay, after the faults it always sends.
type faultTransport struct{ always string }

func (f faultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	spec, _ := r.Context().Value(faultsKey{}).(string)
	if spec = strings.Trim(f.always+","+spec, ","); spec != "" {
		r = r.Clone(r.Context())
		r.Header.Set(fakepay.FaultHeader, spec)
	}
	return http.DefaultTransport.RoundTrip(r)
}
