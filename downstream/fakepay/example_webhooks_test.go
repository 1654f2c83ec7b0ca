package fakepay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/keys"
)

// A charge from "tok_async" is answered as processing; the webhook tells when it succeeded.
func Example_webhooks() {
	events := make(chan string, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A real receiver checks r.Header.Get(fakepay.SignatureHeader) first.
		var e struct {
			Type string `json:"type"`
			Data struct {
				Object struct {
					Status string `json:"status"`
				} `json:"object"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&e)
		events <- e.Type + " " + e.Data.Object.Status
	}))
	defer receiver.Close()

	srv, _ := fakepay.New(&fakepay.Config{Webhooks: fakepay.WebhookConfig{URL: receiver.URL, Secret: "whsec_test"}})
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()

	ctx := keys.WithToken(context.Background(), keys.Key{Namespace: "default", Operation: "charge", ID: "order-1"}.Token())
	ch, _ := fakepay.NewClient(hs.URL).Charge(ctx, downstream.ChargeRequest{Amount: 4200, Currency: "eur", Source: "tok_async"})
	fmt.Println(ch.Status)
	fmt.Println(<-events)
	// Output:
	// processing
	// charge.succeeded succeeded
}
