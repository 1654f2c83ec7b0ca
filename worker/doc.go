// Package worker is the start-up of a tempotent worker, reusable by your own: configuration from
// flags and environment (Config.Bind) validated with messages that say what to do, a Temporal
// client (or the dev server, started from the pinned CLI with its Web UI, when no address is
// given), a Postgres pool (or the local server, or a throwaway cluster), the receipt store and
// its migrations, the outbox in the same schema (Env.Outbox) with dispatchers that run beside the
// worker (Env.Dispatch), a worker with tempotent's interceptor, maintenance that purges receipts
// past their retention and the schema's inbox records (inbox consumers' and webhook handlers')
// past Config.InboxRetention, one worker per schema at a time (Config.PurgeEvery, Env.PurgeRound),
// each round recorded for the console and tempotent doctor (operator.Client.MaintenanceRuns),
// and a clean stop on SIGINT/SIGTERM that gives running activities a grace period.
//
//	env, err := worker.Start(ctx, worker.Config{TaskQueue: "payments", Migrate: true})
//	if err != nil {
//		return err // e.g. "postgres at … does not answer: … Check DATABASE_URL …"
//	}
//	defer env.Close()
//	w := env.NewWorker()
//	if err := activity.Register(w, env.Store, "Charge", Charge, activity.Options{DownstreamDeduplicates: true}); err != nil {
//		return err
//	}
//	return env.Run(ctx, w)
//
// The runnable sample worker, samples/payment/cmd/worker, is built on it.
package worker
