// Package keys derives the idempotency keys that make a Temporal activity's effect happen once
// per business intent, and the values derived from them: downstream tokens, compensation keys
// and request fingerprints.
//
// A Key has four parts: the Temporal namespace, an optional tenant, the operation (the activity
// type by default) and an ID. The ID comes from one of three scopes:
//
//   - ScopeWorkflow (default): workflow ID + OriginalRunID + a step name chosen in workflow code
//     (WithStep) with an occurrence counter. Survives workflow Reset; differs across
//     Continue-As-New, Retry and Cron runs. Needs Interceptor on the workers.
//   - ScopeRun: workflow ID + run ID + activity ID, as Temporal's docs advise. Stable across
//     retries, not across Reset.
//   - ScopeExplicit: a business key such as "order-123/charge" (WithID, or Options.ID).
//
// Attempt numbers are never part of a key, and derivation never falls back to an empty or
// shared ID: when the identity is missing it returns ErrNoIdentity. Malformed tenants, steps and
// IDs (empty, too long, NUL or control bytes, invalid UTF-8) are an *InvalidKeyError.
//
// The tenant travels in Temporal headers from the client that starts the workflow (WithTenant
// and TenantPropagator), never in the activity's input.
//
// Key.Token is what an external system sees: 43 URL-safe characters hashed from all four parts
// (Token.UUID for APIs that want a UUID). Key.Compensation derives the key of a compensation
// from its forward step. FingerprintOf and FingerprintJSON hash a request's canonical JSON, so
// that the same key with a different request can be refused.
//
// Install the interceptor and the propagator on the worker and the client:
//
//	c, err := client.Dial(client.Options{ContextPropagators: []workflow.ContextPropagator{keys.TenantPropagator()}})
//	w := worker.New(c, "payments", worker.Options{Interceptors: []interceptor.WorkerInterceptor{&keys.Interceptor{}}})
//
// and, in an activity:
//
//	k, err := keys.FromActivity(ctx, keys.Options{})
//
// The activity package builds on this: most users install its interceptor, which includes
// this one, and never derive keys by hand.
package keys
