// Package webhook receives a provider's webhooks so that each event reaches its workflow once:
// Handler verifies the signature over the exact bytes received, remembers the delivery ID per
// tenant and source, and puts the event in the outbox, all before it answers 2xx; a Dispatcher
// with an outbox.TemporalPublisher then hands it to Temporal, whose own deduplication (a
// workflow ID, an update ID derived from the delivery) absorbs a repeated delivery.
//
//	out, _ := outbox.New(pool, nil)
//	h, _ := webhook.NewHandler(pool, out, webhook.HandlerConfig{
//		Source:   "stripe",
//		Verifier: webhook.Stripe{Secrets: []string{os.Getenv("STRIPE_WEBHOOK_SECRET")}},
//	})
//	http.Handle("POST /webhooks/stripe", h)
//
// A crash before the commit loses nothing (the provider gets no 2xx and retries); a crash after
// it loses nothing either (the outbox delivers). A forged, stale, oversized or malformed delivery
// is answered 4xx with nothing stored and nothing started; a replayed one is answered 200 and
// stored once (for Stripe, even when only its delivery metadata, pending_webhooks and request,
// changed), and one under a known ID with another event 409. Settings that cannot work are
// refused by NewHandler with a *ConfigError; two deployments putting one Source under two
// Topics are found through the database (ErrTopicConflict).
//
// What each endpoint answered (accepted, duplicate, refused by reason, failed) is counted in the
// metrics and, a few seconds later, in the schema's webhook_tallies table, which tempotent
// webhooks and the console show: a handler counts in memory and writes at most one statement per
// HandlerConfig.TallyEvery, so that a flood of forged deliveries costs the database nothing per
// request. Handler.Close writes what is left; call it after the server's Shutdown.
//
// Verifiers: Stripe (the Stripe-Signature scheme), StandardWebhooks (webhook-id,
// webhook-timestamp, webhook-signature; v1 HMAC-SHA256 with secrets, v1a ed25519 with public keys)
// and GitHub (X-Hub-Signature-256), each with several secrets or keys at once for rotation,
// constant-time comparison of HMACs, and, where the scheme signs a timestamp, a tolerance.
// SignStripe and SignStandardWebhooks sign deliveries for tests; outbox.HTTPPublisher signs
// Standard Webhooks deliveries for real.
package webhook
