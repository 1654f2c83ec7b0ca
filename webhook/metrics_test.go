package webhook_test

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"
)

// tagRecorder is a client.MetricsHandler that remembers, per metric name, every set of tag keys
// it was used with: a Prometheus reporter (tally's) refuses a name registered with two.
type tagRecorder struct {
	mu   *sync.Mutex
	keys map[string]map[string]bool // name → the sorted tag keys it was used with
	tags map[string]string
}

func newTagRecorder() *tagRecorder {
	return &tagRecorder{mu: &sync.Mutex{}, keys: map[string]map[string]bool{}, tags: map[string]string{}}
}

func (r *tagRecorder) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(r.tags)
	maps.Copy(merged, tags)
	return &tagRecorder{mu: r.mu, keys: r.keys, tags: merged}
}

func (r *tagRecorder) use(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys[name] == nil {
		r.keys[name] = map[string]bool{}
	}
	r.keys[name][strings.Join(slices.Sorted(maps.Keys(r.tags)), ",")+"|"+r.tags["reason"]] = true
}

// tagSets returns the tag keys (and the reason's value after "|") name was used with.
func (r *tagRecorder) tagSets(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.keys[name]))
}

func (r *tagRecorder) Counter(name string) client.MetricsCounter {
	r.use(name)
	return client.MetricsNopHandler.Counter(name)
}

func (r *tagRecorder) Gauge(name string) client.MetricsGauge {
	r.use(name)
	return client.MetricsNopHandler.Gauge(name)
}

func (r *tagRecorder) Timer(name string) client.MetricsTimer {
	r.use(name)
	return client.MetricsNopHandler.Timer(name)
}
