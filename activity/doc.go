// Package activity makes a Temporal activity's effect happen once per business intent, although
// Temporal runs activities at least once. It keeps a receipt per intent in Postgres (pgx/v5):
//
//   - the first execution reserves the key, runs the function with the key's downstream token in
//     its context (keys.TokenFrom) and records the result: 2 round trips and, when the downstream
//     deduplicates, one WAL flush (the reservation commits asynchronously and is made durable by
//     the completion's commit). First executions running at once in one worker share their
//     statements: reservations that arrive while one is being written go out together, in one
//     statement and one commit, and so do completions; a lone attempt waits for nobody (there is
//     no timer), and each returns only once its own receipt is committed;
//   - a retry, a replay, a worker that crashed after recording but before reporting, all get the
//     recorded result back, byte for byte, without running the function: 1 round trip — from the
//     second attempt on (Temporal's, or Call.Attempt) a plain lookup that writes nothing, on a
//     first attempt (a reset workflow) the statement that would have reserved;
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
// DoInNewTx and DoInTx are the path for effects in the same Postgres: the receipt and the
// caller's writes commit in one transaction, exactly once — a transaction DoInNewTx opens, or the
// caller's own (DoInTx), in as many round trips as that transaction.
//
// In a Temporal worker there is one way in: install the interceptor, and register each activity
// once, typed, with what its downstream guarantees. Workflow code decides each activity's key
// (see the keys package); the worker's configuration cannot change it.
//
//	store, err := activity.NewStore(pool, nil)
//	err = store.Migrate(ctx)
//	w := worker.New(c, "payments", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()},
//	})
//	err = activity.Register(w, store, "Charge", Charge, activity.Options{DownstreamDeduplicates: true})
//	err = activity.RegisterTx(w, store, "ReserveStock", ReserveStock, activity.Options{})
//
// Outside Temporal (a Nexus handler, a queue consumer, an HTTP handler), Do, DoInNewTx and
// DoInTx take an explicit Call, whose key you build with keys.Explicit.
//
// A batch activity (a payout to 1,000 sellers, a mailing) runs its items with ForEach: each
// item under a receipt of its own, keyed from the activity's key, the pass's name
// (Items.Operation: required, and one per pass over the same items) and the item's ID, so that a
// retry after a crash at item 600 replays the 600 (their receipts read in one statement) and
// runs the rest. Register such an activity with Options{Batch: true}, or as a plain activity.
//
// A request's fingerprint is keys.FingerprintOf of the activity's input: struct tags choose the
// fields that name the intent (tempotent:"-" leaves a timestamp or trace ID out), and nil and
// empty slices are the same request. A receipt recorded under an older fingerprint version is
// compared under that version.
//
// Errors cross into Temporal as application errors whose types are the ErrType constants. Once
// they have crossed — in workflow code, in a retry policy, after a replay — match them by type
// (temporal.ApplicationError.Type() == activity.ErrTypeOutcomeUnknown), not with errors.Is:
// Temporal carries the type, message and details, not the Go chain. Inside the activity,
// errors.As still finds the typed errors (*MismatchError, *InProgressError, …) in their causes.
//
// Receipts live for Config.Retention after they finish (7 days by default). Purge them
// periodically (the worker package does; operator.Client.Purge is the primitive); the
// replay-horizon guard refuses activities scheduled longer ago than the retention, because their
// receipts may be gone. A large table can be partitioned by day (operator.Client.Partition,
// once), so that a purge drops whole days instead of deleting rows; a lookup and an insert then
// cost more (every day's partition is probed). Listing, reading and settling receipts by hand is
// the operator package's too.
package activity
