package activity_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// countingHandler records counter increments by name and "operation" tag.
type countingHandler struct {
	mu     *sync.Mutex
	counts map[string]int64
	tags   map[string]string
}

func newCountingHandler() *countingHandler {
	return &countingHandler{mu: &sync.Mutex{}, counts: map[string]int64{}}
}

func (h *countingHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := map[string]string{}
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &countingHandler{mu: h.mu, counts: h.counts, tags: merged}
}

func (h *countingHandler) Counter(name string) client.MetricsCounter {
	return counterFunc(func(d int64) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.counts[name+"/"+h.tags["operation"]] += d
	})
}

func (h *countingHandler) Gauge(string) client.MetricsGauge {
	return client.MetricsNopHandler.Gauge("")
}
func (h *countingHandler) Timer(string) client.MetricsTimer {
	return client.MetricsNopHandler.Timer("")
}

func (h *countingHandler) get(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[name+"/Charge"]
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

func TestMetricsThroughTheActivityHandler(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newProvider()
	metrics := newCountingHandler()
	run := func(req ChargeRequest) error {
		var suite testsuite.WorkflowTestSuite
		suite.SetMetricsHandler(metrics)
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{
			Interceptors:              []interceptor.WorkerInterceptor{activity.NewInterceptor()},
			BackgroundActivityContext: keys.Given(context.Background(), "Charge", "o-1"),
		})
		if err := activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}); err != nil {
			return err
		}
		_, err := env.ExecuteActivity("Charge", req)
		return err
	}
	require.NoError(t, run(ChargeRequest{Order: "o-1", Amount: 100}))
	require.NoError(t, run(ChargeRequest{Order: "o-1", Amount: 100}))
	require.Error(t, run(ChargeRequest{Order: "o-1", Amount: 999}))

	require.Equal(t, int64(1), metrics.get(telemetry.ReceiptMismatched))
	require.Equal(t, int64(1), metrics.get(telemetry.ReceiptReserved))
	require.Equal(t, int64(1), metrics.get(telemetry.ReceiptReplayed))
	require.Equal(t, int64(0), metrics.get(telemetry.ReceiptTakenOver))
}
