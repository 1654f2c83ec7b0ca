package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

type charge struct {
	ID string `json:"id"`
}

// TestReceiptStepsAreSpansUnderRunActivity runs a registered activity twice with the SDK's
// OpenTelemetry tracing interceptor, as Temporal runs it again after a crash before report: the
// first run's trace has Reserve, Call and Complete under RunActivity, the downstream's own span
// under Call; the second has Reserve and Replay, and no Call. No span carries the key.
func TestReceiptStepsAreSpansUnderRunActivity(t *testing.T) {
	ctx := context.Background()
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = provider.Shutdown(ctx) })
	opts := opentelemetry.TracerOptions{Tracer: provider.Tracer("test")}
	tracer, err := opentelemetry.NewTracer(opts)
	require.NoError(t, err)
	tracing, err := opentelemetry.NewTracingInterceptor(opts)
	require.NoError(t, err)

	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: pgtest.Schema(t), Tracer: tracer})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	const secret = "customer-42@example.com" // in the key's ID: it must reach no span
	calls := 0
	chargeFn := func(ctx context.Context, amount int) (charge, error) {
		calls++
		// The downstream's own span, as an instrumented HTTP client would make it.
		_, sp := provider.Tracer("http").Start(ctx, http.MethodPost+" /v1/charges")
		sp.End()
		return charge{ID: "ch_1"}, nil
	}
	run := func() {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{
			Interceptors:              []interceptor.WorkerInterceptor{tracing, activity.NewInterceptor()},
			BackgroundActivityContext: keys.Given(ctx, "Charge", secret),
		})
		require.NoError(t, activity.Register(env, store, "Charge", chargeFn, activity.Options{DownstreamDeduplicates: true}))
		_, err := env.ExecuteActivity("Charge", 100)
		require.NoError(t, err)
	}

	run()
	first := recorder.Ended()
	requireChildren(t, first, "RunActivity:Charge", "tempotent.Reserve:Charge", "tempotent.Call:Charge", "tempotent.Complete:Charge")
	requireChildren(t, first, "tempotent.Call:Charge", "POST /v1/charges")

	run()
	second := recorder.Ended()[len(first):]
	requireChildren(t, second, "RunActivity:Charge", "tempotent.Reserve:Charge", "tempotent.Replay:Charge")
	require.Equal(t, 1, calls, "the second run called the downstream again")

	token := ""
	for _, s := range recorder.Ended() {
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), secret, "span %s carries the raw key in %s", s.Name(), kv.Key)
			if kv.Key == attribute.Key(telemetry.TagToken) {
				token = kv.Value.AsString()
			}
		}
		require.NotContains(t, s.Name(), secret)
	}
	require.NotEmpty(t, token, "no span is tagged with the token")
}

// requireChildren asserts that the spans named children, and only those of tempotent's, are
// children of the span named parent, in that order of start.
func requireChildren(t *testing.T, spans []sdktrace.ReadOnlySpan, parent string, children ...string) {
	t.Helper()
	var parentID trace.SpanID
	for _, s := range spans {
		if s.Name() == parent {
			parentID = s.SpanContext().SpanID()
		}
	}
	require.True(t, parentID.IsValid(), "no span %q among %v", parent, names(spans))
	var got []string
	for _, s := range spans {
		if s.Parent().SpanID() == parentID {
			got = append(got, s.Name())
		}
	}
	startOrder(spans, got)
	require.Equal(t, children, got, "the children of %s", parent)
}

// startOrder sorts names by their spans' start times.
func startOrder(spans []sdktrace.ReadOnlySpan, names []string) {
	start := map[string]int64{}
	for _, s := range spans {
		start[s.Name()] = s.StartTime().UnixNano()
	}
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && start[names[j]] < start[names[j-1]]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return strings.Join(out, ", ")
}
