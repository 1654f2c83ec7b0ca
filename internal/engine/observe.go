package engine

import (
	"context"
	"time"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// observer sends counters and log lines to the activity's own metrics handler and logger, and
// nowhere when the call runs outside an activity.
type observer struct {
	metrics client.MetricsHandler
	logger  log.Logger
	key     keys.Key
}

func newObserver(ctx context.Context, s *Store, k keys.Key) observer {
	if !sdkactivity.IsActivity(ctx) {
		return observer{metrics: client.MetricsNopHandler, key: k}
	}
	return observer{
		metrics: sdkactivity.GetMetricsHandler(ctx).WithTags(map[string]string{telemetry.MetricTagOperation: k.Operation}),
		logger:  sdkactivity.GetLogger(ctx),
		key:     k,
	}
}

func (o observer) count(name string) { o.metrics.Counter(name).Inc(1) }

func (o observer) log(msg string, keyvals ...any) {
	if o.logger == nil {
		return
	}
	// The token and operation only: a key holds workflow and explicit IDs, which may carry
	// customer data.
	o.logger.Info("tempotent: "+msg, append([]any{"operation", o.key.Operation, "token", o.key.Token().String()}, keyvals...)...)
}

// span is one receipt step being traced; the zero span traces nothing.
type span struct {
	span interceptor.TracerSpan
}

// noSpan is the span of every step when there is no tracer: shared, since end only reads a zero
// span, and not allocated for each step (a replay has two).
var noSpan span

// startSpan starts the span of a receipt step on the store's Config.Tracer, as a child of the
// span in ctx, and returns ctx with the new span in it.
func (s *Store) startSpan(ctx context.Context, step string, k keys.Key) (context.Context, *span) {
	t := s.cfg.Tracer
	if t == nil {
		return ctx, &noSpan
	}
	tags := map[string]string{telemetry.TagToken: k.Token().String(), telemetry.TagOperation: k.Operation}
	opts := &interceptor.TracerStartSpanOptions{Operation: step, Name: k.Operation, Time: time.Now(), DependedOn: true, Tags: tags}
	if parent := t.SpanFromContext(ctx); parent != nil {
		opts.Parent = parent
	}
	sp, err := t.StartSpan(opts)
	if err != nil {
		return ctx, &noSpan // tracing never fails an attempt
	}
	return t.ContextWithSpan(ctx, sp), &span{span: sp}
}

// end finishes the span, recording err; a span ends once, and later calls do nothing.
func (sp *span) end(err error) {
	if sp.span != nil {
		sp.span.Finish(&interceptor.TracerFinishSpanOptions{Error: err})
		sp.span = nil
	}
}
