package payment

import (
	"context"
	"errors"
	"net/http"
	"time"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/keys"
)

// Activities are the sample's activities. Payments is the payment provider; Carrier is the
// shipping company's API, which in the sample is a second fakepay: a shipment is a "charge"
// of the parcel's units, a cancellation its refund, with the same idempotency contract.
type Activities struct {
	Payments downstream.Payments
	Carrier  downstream.Payments
}

// NewActivities returns the activities for a payment provider and a carrier that speak
// fakepay's API at the given addresses. Their requests carry each order's fault specs.
func NewActivities(paymentsURL, carrierURL string) *Activities {
	client := func(url string) *fakepay.Client {
		c := fakepay.NewClient(url)
		c.HTTP = &http.Client{Transport: &downstream.Transport{Base: faultTransport{}}}
		return c
	}
	return &Activities{Payments: client(paymentsURL), Carrier: client(carrierURL)}
}

// Charge charges the order's card under the step's token.
func (a *Activities) Charge(ctx context.Context, o Order) (downstream.Charge, error) {
	return a.Payments.Charge(withFaults(ctx, o.ChargeFaults), downstream.ChargeRequest{
		Amount: o.Amount, Currency: o.Currency, Source: o.Card, Description: o.ID,
	})
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

// InterceptorConfig selects the activities whose effects are external: their receipts are
// applied by the interceptor, and the providers deduplicate on the token.
func InterceptorConfig() activity.InterceptorConfig {
	dedup := activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: SettleTime}
	return activity.InterceptorConfig{Activities: map[string]activity.Options{
		"Charge": dedup, "Refund": dedup, "CreateShipment": dedup, "CancelShipment": dedup,
	}}
}

// Register registers the sample's workflow and activities on w. The inventory and order
// activities write to Postgres in their receipt's transaction (activity.WrapTx).
func Register(w worker.Worker, a *Activities, store *activity.Store) {
	w.RegisterWorkflowWithOptions(PaymentSaga, workflow.RegisterOptions{Name: "PaymentSaga"})
	w.RegisterWorkflowWithOptions(QuickCharge, workflow.RegisterOptions{Name: "QuickCharge"})
	for name, fn := range map[string]any{
		"Charge":           a.Charge,
		"Refund":           a.Refund,
		"CreateShipment":   a.CreateShipment,
		"CancelShipment":   a.CancelShipment,
		"ReserveInventory": activity.WrapTx(store, reserve, nil),
		"ReleaseInventory": activity.WrapTx(store, release, &activity.Options{DownstreamSettleTime: SettleTime}),
		"ConfirmOrder":     activity.WrapTx(store, confirm, nil),
	} {
		w.RegisterActivityWithOptions(fn, sdkactivity.RegisterOptions{Name: name})
	}
}

type faultsKey struct{}

func withFaults(ctx context.Context, spec string) context.Context {
	if spec == "" {
		return ctx
	}
	return context.WithValue(ctx, faultsKey{}, spec)
}

// faultTransport sends the order's fault spec to fakepay.
type faultTransport struct{}

func (faultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if spec, ok := r.Context().Value(faultsKey{}).(string); ok {
		r = r.Clone(r.Context())
		r.Header.Set(fakepay.FaultHeader, spec)
	}
	return http.DefaultTransport.RoundTrip(r)
}
