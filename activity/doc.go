// Package activity makes a Temporal activity's effect happen once per business intent, although
// Temporal runs activities at least once. It keeps a receipt per intent in Postgres (pgx/v5):
//
//   - the first execution reserves the key, runs the function with the key's downstream token in
//     its context (keys.TokenFrom) and records the result: 2 round trips and, when the downstream
//     deduplicates, one WAL flush (the reservation commits asynchronously and is made durable by
//     the completion's commit);
//   - a retry, a replay, a worker that crashed after recording but before reporting, all get the
//     recorded result back, byte for byte, without running the function: 1 round trip;
//   - a worker that crashed after the external call but before recording leaves a lease; the
//     next attempt takes over when it ends and calls again with the same token, which a
//     deduplicating downstream (Stripe, the downstream package) answers with the first result;
//     for one that does not deduplicate, a reconcile function is asked, or the attempt fails
//     with ErrTypeOutcomeUnknown instead of guessing;
//   - the same key with a different request is a non-retryable ErrTypePayloadMismatch, and
//     nothing is called;
//   - a duplicate that finds a live attempt watches its receipt for up to Config.InProgressWait
//     and answers with that attempt's outcome, or fails with a retryable ErrTypeInProgress;
//   - a fence number keeps an attempt that lost its lease from overwriting a newer outcome.
//
// DoTx (and WrapTx) is the path for effects in the same Postgres: the receipt and the caller's
// writes commit in one transaction, exactly once, in as many round trips as the caller's own
// transaction.
//
// There are two ways in. Wrap a typed activity function:
//
//	store, err := activity.NewStore(pool, nil)
//	err = store.Migrate(ctx)
//	w.RegisterActivityWithOptions(activity.Wrap(store, Charge, &activity.Options{DownstreamDeduplicates: true}),
//		sdkactivity.RegisterOptions{Name: "Charge"})
//
// or select activities in the worker interceptor, which needs no change to their code and also
// carries key headers (keys.Interceptor) and extends leases on heartbeats:
//
//	w := worker.New(c, "payments", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor(store, activity.InterceptorConfig{
//			Activities: map[string]activity.Options{"Charge": {DownstreamDeduplicates: true}},
//		})},
//	})
//
// Errors cross into Temporal as application errors whose types are the ErrType constants, so
// workflows and retry policies can name them; errors.As still finds the typed errors
// (*MismatchError, *InProgressError, …) in their causes.
//
// Receipts live for Config.Retention after they finish (7 days by default). Run Purge
// periodically to delete expired ones; the replay-horizon guard refuses activities scheduled
// longer ago than the retention, because their receipts may be gone.
package activity
