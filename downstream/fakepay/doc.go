// Package fakepay is a fake payment provider honest enough to count effects in tests: it has
// Stripe's idempotency contract and speaks the part of Stripe's API that tempotent uses.
//
// The first response per Idempotency-Key is stored and replayed (declines too); the same key
// with other parameters is refused with a 400 idempotency_error; a duplicate that arrives while
// the first is in flight gets 409; keys are forgotten after a retention. Refunding a charge that
// never happened is a no-op for Client.Refund. Its ledger (Server.Ledger, GET /ledger) counts
// charges per token, refunds per charge and webhook deliveries per event, so tests assert
// effects from the provider's side.
//
// Faults (Faults, ParseFaults) are set for a whole run (Config.Faults, PUT /faults, -faults) or
// per request (the Fakepay-Fault header): fail N times with 500, 429 with Retry-After, slow
// responses, declines, and "apply, then drop the connection" — the response is lost; and, with
// ignore_keys, a provider that does not deduplicate at all.
//
// Charges from the sources "tok_async" and "tok_asyncDeclined" are confirmed later: answered as
// "processing", they become "succeeded" or "failed" after WebhookConfig.AsyncDelay. With
// Config.Webhooks.URL, every change of a charge is also sent there as a Stripe-shaped event
// (charge.succeeded, charge.failed, charge.refunded), signed in Stripe's scheme
// (Stripe-Signature) and delivered at least once; faults duplicate, delay and reorder the
// deliveries or lose their answers, and POST /webhooks/replay sends events again. A Server with
// webhooks or asynchronous charges runs goroutines: Close it.
//
//	srv, _ := fakepay.New(&fakepay.Config{Webhooks: fakepay.WebhookConfig{URL: receiverURL, Secret: "whsec_test"}})
//	defer srv.Close()
//
// It runs in-process (Server is an http.Handler; use httptest.NewServer) or as its own process,
// whose state file survives SIGKILL:
//
//	go run ./downstream/fakepay/cmd/fakepay -addr 127.0.0.1:8420 -state .tmp/fakepay.json
//	curl -s 127.0.0.1:8420/ledger
package fakepay
