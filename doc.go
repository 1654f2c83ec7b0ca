// Package tempotent makes Temporal activities safe to retry: payments, refunds, e-mails and
// bookings happen once per business intent, although Temporal runs activities at least once.
//
// This package holds no code; the toolkit is its sub-packages:
//
//   - keys decides each activity's idempotency key in workflow code (workflow, run, update and
//     explicit scopes) and derives the token a downstream sees;
//   - activity keeps a receipt per key in Postgres: Register an activity once, typed, and a
//     retry, a replay, a reset or a takeover after a crash gets the recorded result instead of a
//     second effect; DoInNewTx and DoInTx commit local writes with their receipt;
//   - saga runs sagas whose compensations have keys of their own;
//   - downstream puts the token on the wire (Transport) and classifies answers (Check);
//     downstream/fakepay is a fake payment provider with Stripe's idempotency contract, and the
//     nested module downstream/stripe adapts stripe-go;
//   - worker starts a worker with configuration, the dev server or a local Postgres when none is
//     given, and a clean stop;
//   - outbox, inbox and webhook carry messages in and out in the same transactions;
//   - activitytest proves, in your own tests, that your activities are safe to retry;
//   - operator is what the person on call does with receipts from Go: list, show, resolve and
//     re-arm them, count, purge and partition them;
//   - cmd/tempotent is the operator's command, built on operator: list, show and resolve
//     receipts, purge, stats, migrate, doctor; the nested module tracing shows receipt steps in OpenTelemetry traces;
//   - samples/payment is the sample payment saga (make demo runs it end to end).
//
// A worker needs two lines more than a plain Temporal worker:
//
//	w := worker.New(c, "payments", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()},
//	})
//	err := activity.Register(w, store, "Charge", Charge, activity.Options{DownstreamDeduplicates: true})
//
// The README states the guarantee and its limits; DESIGN.md is the contract and FAULTS.md the
// faults it is tested against.
package tempotent
