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
	srv, proxy, a := activitiesOnFakepay(t)
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
			c.Input, c.Other, c.Effects, c.Faults = order, other, charges, proxy
			activitytest.RequireRetrySafe(t, c)
		})
	}
}

// The payout batch, registered with Options{Batch: true}: every path replays or takes over its
// own receipt and then ForEach's items, and no seller is paid twice.
func TestPayOutIsRetrySafe(t *testing.T) {
	t.Parallel()
	srv, proxy, a := activitiesOnFakepay(t)
	store := activitytest.NewStore(t, nil)
	p := payment.Payout{ID: "payout-1"}
	for _, id := range []string{"s1", "s2", "s3"} {
		p.Sellers = append(p.Sellers, payment.Seller{ID: id, Account: "tok_visa", Amount: 500, Currency: "eur"})
	}
	other := p
	other.Sellers = append([]payment.Seller(nil), p.Sellers...)
	other.Sellers[1].Amount = 900
	activitytest.RequireRetrySafe(t, activitytest.Check[payment.Payout, payment.PayoutResult]{
		Activity: a.PayOut(store), Options: activity.Options{Batch: true}, Store: store,
		Input: p, Other: other, Faults: proxy,
		// Counted per seller: every path must pay each seller once.
		Items: func(p payment.Payout) []string {
			ids := make([]string, len(p.Sellers))
			for i, s := range p.Sellers {
				ids[i] = s.ID
			}
			return ids
		},
		ItemEffects: func() map[string]int {
			perSeller := map[string]int{}
			for _, c := range srv.Ledger().Charges {
				for _, s := range p.Sellers {
					if c.Description == payment.PayoutDescription(p.ID, s.ID) {
						perSeller[s.ID]++
					}
				}
			}
			return perSeller
		},
	})
}

// activitiesOnFakepay returns the sample's activities against one fakepay of the test's own, as
// provider, carrier and gateway, through a proxy that fails the requests a check asks it to;
// the gateway's lookups (reconcile) go through a proxy of their own that fails nothing. A check
// runs a takeover in a worker process of its own, which reaches the test's fakepay only through
// activitytest's proxies: one it made would be empty.
func activitiesOnFakepay(t *testing.T) (*fakepay.Server, *activitytest.FaultProxy, *payment.Activities) {
	t.Helper()
	srv, err := fakepay.New(nil)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	proxy, lookups := activitytest.NewFaultProxy(t, hs.URL), activitytest.NewFaultProxy(t, hs.URL)
	return srv, proxy, payment.NewActivities(nil, proxy.URL, proxy.URL, lookups.URL)
}
