// Package shard spreads receipts over several Postgres databases by tenant: each shard is an
// activity.Store on its own pool, a directory table names the shard of every tenant that is not
// on the default one, and a Router picks the store for each call from the key's tenant. A
// tenant's receipts always reach one database, so everything activity guarantees holds per
// shard: one receipt per intent, fencing, the replay-horizon guard, purge. Nothing orders or
// joins receipts of two shards; none of the guarantees needs it.
//
//	eu1, err := activity.NewStore(eu1Pool, &activity.Config{TenantFences: true}) // eu2 alike
//	router, err := shard.NewRouter(shard.Config{
//		Directory: directoryPool,
//		Shards:    map[string]*activity.Store{"eu-1": eu1, "eu-2": eu2},
//		Default:   "eu-1",
//	})
//	err = router.Migrate(ctx) // the directory's table; each shard's store migrates its own
//	err = shard.Register(w, router, "Charge", payments.Charge, activity.Options{DownstreamDeduplicates: true})
//
// Outside Temporal, or for ForEach, ask the Router for the store and use activity's functions:
//
//	s, err := router.Store(ctx, k.Tenant)
//	out, err := activity.Do(ctx, s, activity.Call{Key: k, Request: req}, charge)
//
// A tenant moves between shards only by Move (the tempotent command's "shard move"): "drain,
// then switch". Its calls are refused, retryably, from the move's fence to its switch; its
// receipts are copied, so that a retry after the move replays what the old shard recorded
// instead of acting again. The old shard keeps its own record of the fence (tenant_fences,
// migration 012), which every receipt statement of a store opened with
// activity.Config.TenantFences checks: a worker handed the old shard's store before the move is
// refused there with a MovedError, however late it arrives, and Register runs the call again on
// the new shard. Such a store runs its receipt statements under READ COMMITTED only (a
// transaction given to DoInTx at another level is refused): an older snapshot could miss the
// fence. A Router reads a tenant's shard from the directory at most once per
// Config.MaxStale, and never uses an answer older than that: every worker sees a move without a
// restart.
//
// RegisterTx and activity.DoInNewTx commit a receipt with the caller's writes in the shard's
// database: a tenant's business rows must live in its shard, and moving the tenant moves only
// its receipts.
package shard
