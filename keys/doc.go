// Package keys derives the idempotency keys that make a Temporal activity's effect happen once
// per business intent, and the values derived from them: downstream tokens, compensation keys
// and request fingerprints.
//
// A Key has four parts: the Temporal namespace, an optional tenant, the operation (the activity
// type by default) and an ID. The ID comes from one of three scopes:
//
//   - ScopeWorkflow (default): workflow ID + OriginalRunID + a step name chosen in workflow code
//     (WithStep, StepKey) with an occurrence counter. Survives workflow Reset; differs across
//     Continue-As-New, Retry and Cron runs. Needs Interceptor on the workers.
//   - ScopeRun: workflow ID + run ID + activity ID, as Temporal's docs advise. Stable across
//     retries, not across Reset.
//   - ScopeExplicit: a business key such as "order-123/charge" (WithID, ExplicitKey, or
//     Options.ID).
//
// An ID is spelled with a tag that names its scope, then the identity's parts, each
// percent-escaped ('%' as %25, '/' as %2F, '#' as %23) and joined with '/':
//
//	wf:order-123/<OriginalRunID>/charge#1      ScopeWorkflow, the first "charge" step
//	run:order-123/<run ID>/5                   ScopeRun
//	activity:<activity ID>/<activity run ID>   ScopeRun, an activity started without a workflow
//	explicit:order-123/charge                  ScopeExplicit, the caller's ID as given
//	comp:Charge/<forward token>                a compensation (Key.Compensation)
//
// so no two identities share an ID, and no explicit ID equals a derived one, whatever
// characters workflow IDs, steps and explicit IDs contain. A derived ID longer than MaxIDLen
// becomes its hash, still tagged: "wf:sha256:<hex>". Explicit IDs are limited to MaxIDLen bytes
// as given; Key.ID allows MaxKeyIDLen for the tag.
//
// Upgrading from a version without this encoding changes the IDs, and so the tokens, of
// explicit keys, compensation keys, hashed IDs and IDs whose parts contain '%', '/' or '#': an
// intent in flight across the upgrade gets a new key, and could take effect twice. Drain the
// workers before upgrading.
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
