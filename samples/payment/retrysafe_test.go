package payment_test

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/samples/payment"
)

// The sample's charging activities, registered with the options Register gives them, are safe
// to retry on every path activitytest knows, counted in fakepay's ledger: the provider's charge
// (a deduplicating downstream), the gateway's (one that ignores keys, settled by
// downstream.ReconcileCharge) and the carrier's booking.
func TestActivitiesAreRetrySafe(t *testing.T) {
	t.Parallel()
	srv, err := fakepay.New(nil)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	a := payment.NewActivities(nil, hs.URL, hs.URL, "")
	charges := func() int { return len(srv.Ledger().Charges) }
	order := payment.Order{ID: "order-1", Amount: 4200, Currency: "eur", Card: "tok_visa", SKU: "book", Units: 1, Address: "Main St 1"}
	other := order
	other.Amount = 9900

	type check = activitytest.Check[payment.Order, downstream.Charge]
	for name, c := range map[string]check{
		"Charge": {Activity: a.Charge, Options: activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: payment.SettleTime}},
		"LegacyCharge": {Activity: a.LegacyCharge,
			Options: activity.Options{DownstreamSettleTime: payment.SettleTime, Reconcile: downstream.ReconcileCharge(a.GatewayLookup)}},
		"CreateShipment": {Activity: a.CreateShipment, Options: activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: payment.SettleTime}},
	} {
		t.Run(name, func(t *testing.T) {
			c.Input, c.Other, c.Effects = order, other, charges
			activitytest.RequireRetrySafe(t, c)
		})
	}
}
