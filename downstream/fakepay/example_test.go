package fakepay_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/keys"
)

func Example() {
	srv, _ := fakepay.New(nil)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	client := fakepay.NewClient(hs.URL)

	// In an activity wrapped by tempotent the token is already in the context.
	charge := keys.Key{Namespace: "default", Operation: "charge", ID: "order-1"}.Token()
	ctx := keys.WithToken(context.Background(), charge)
	req := downstream.ChargeRequest{Amount: 4200, Currency: "eur", Source: "tok_visa"}
	first, _ := client.Charge(ctx, req)
	retry, _ := client.Charge(ctx, req) // a Temporal retry: same token, same charge
	fmt.Println(first.ID == retry.ID, len(srv.Ledger().Charges))

	refundCtx := keys.WithToken(context.Background(), keys.Key{Namespace: "default", Operation: "refund", ID: "order-1"}.Token())
	r, _ := client.Refund(refundCtx, charge)
	fmt.Println(r.Status, srv.Ledger().RefundsByCharge[first.ID])

	never := keys.Key{Namespace: "default", Operation: "charge", ID: "order-2"}.Token()
	r, _ = client.Refund(refundCtx, never)
	fmt.Println(r.Status)
	// Output:
	// true 1
	// succeeded 1
	// no_charge
}
