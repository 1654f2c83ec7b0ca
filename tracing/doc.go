// Package tracing shows, and tests, how tempotent's receipt steps appear in an OpenTelemetry
// trace. It has no code of its own to import: tempotent traces through the Temporal SDK's
// tracer interface (interceptor.Tracer), so a worker that already traces with
// go.temporal.io/sdk/contrib/opentelemetry gives the same tracer to activity.Config.Tracer:
//
//	tracer, err := opentelemetry.NewTracer(opentelemetry.TracerOptions{})
//	// the SDK's spans: RunWorkflow, StartActivity, RunActivity…
//	interceptors := []interceptor.WorkerInterceptor{keys.NewInterceptor()}
//	tracing, err := opentelemetry.NewTracingInterceptor(opentelemetry.TracerOptions{})
//	client.Options{Interceptors: []interceptor.ClientInterceptor{tracing}}
//	// tempotent's spans under each RunActivity: tempotent.Reserve, tempotent.Call,
//	// tempotent.Complete, tempotent.Replay, tempotent.Reconcile
//	store, err := activity.NewStore(pool, &activity.Config{Tracer: tracer})
//
// Each span is named "<step>:<operation>" (for example "tempotent.Call:Charge"), is a child of
// the activity's RunActivity span, and is tagged with the token (tempotent.token) and the
// operation (tempotent.operation) only: never the key, which may hold customer data, nor a
// payload. The spans of the downstream call itself (an instrumented HTTP client) are children of
// tempotent.Call.
//
// This is a module of its own so that the toolkit's go.mod does not carry OpenTelemetry; only
// its tests use it.
package tracing
