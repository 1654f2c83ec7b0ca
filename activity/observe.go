package activity

import (
	"context"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotent/tempotent/keys"
)

// Counter names emitted through the activity's Temporal metrics handler, each tagged with
// "operation" (and "namespace" by the SDK).
const (
	MetricReserved   = "tempotent_receipt_reserved"    // a first execution reserved its key
	MetricReplayed   = "tempotent_receipt_replayed"    // a finished receipt was replayed, nothing called
	MetricMismatched = "tempotent_receipt_mismatched"  // same key, different request
	MetricInProgress = "tempotent_receipt_in_progress" // a duplicate found a live lease
	MetricTakenOver  = "tempotent_receipt_taken_over"  // an attempt took over an ended lease
	MetricFencedOut  = "tempotent_receipt_fenced_out"  // a stale attempt's write was refused
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
		metrics: sdkactivity.GetMetricsHandler(ctx).WithTags(map[string]string{"operation": k.Operation}),
		logger:  sdkactivity.GetLogger(ctx),
		key:     k,
	}
}

func (o observer) count(name string) { o.metrics.Counter(name).Inc(1) }

func (o observer) log(msg string, keyvals ...any) {
	if o.logger == nil {
		return
	}
	o.logger.Info("tempotent: "+msg, append([]any{"key", o.key.String(), "token", o.key.Token().String()}, keyvals...)...)
}
