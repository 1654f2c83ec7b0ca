// Package downstream carries an intent's idempotency key to external systems, and classifies
// what they answer.
//
// An idempotency key protects a charge only if the provider sees the same key on every attempt.
// The activity package puts the intent's token in the activity's context (keys.TokenFrom); this
// package gets it onto the wire and makes the answer mean the right thing to Temporal:
//
//   - Transport, an http.RoundTripper, sets the token in Idempotency-Key (or a header of your
//     choice, such as PayPal-Request-Id) on every unsafe request, refuses to send one without a
//     key, and never overwrites a key the caller set. Its circuit breaker, per host, stops
//     calling a host that keeps failing for a while and refuses those calls unsent with a
//     CircuitOpenError saying when to try again (BreakerConfig); share one Transport.
//
//   - Check classifies a response or transport error into a Temporal application error with an
//     exported type: no response after sending, 5xx, 429 (Retry-After becomes the next retry
//     delay) and 409 "in flight" are retryable with the same key; a 400/422 idempotency error
//     is a non-retryable mismatch; other 4xx, a declined card, are non-retryable and so are
//     recorded and replayed by the receipt. A request that provably never left (connection
//     refused) is marked NotApplied, so the receipt knows its outcome is not unknown.
//
//   - Payments is a payment provider as a saga needs it (charge, refund by the charge's token,
//     look up by token), implemented by fakepay.Client and, in the nested module
//     downstream/stripe, by an adapter over stripe-go. paymentstest is the conformance suite
//     both pass.
//
//     client := &http.Client{Transport: &downstream.Transport{}}
//     req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example.com/v1/payments", body)
//     resp, err := client.Do(req)
//     if err := downstream.Check(req, resp, err); err != nil {
//     return err // typed, retryable or not, ready for Temporal
//     }
//
// Common providers' key limits, all above the 43 characters of a token: Stripe 255 characters,
// Adyen 64, PayPal-Request-Id 108; use keys.Token.UUID where a UUID is required.
package downstream
