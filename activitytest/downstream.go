package activitytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"
)

// Fault is what the recording downstream does to one request.
type Fault int

const (
	// Fail500BeforeEffect answers 500 without applying the request.
	Fail500BeforeEffect Fault = iota + 1
	// Fail500AfterEffect applies the request, then answers 500: the caller cannot tell it
	// happened.
	Fail500AfterEffect
	// DropAfterEffect applies the request, then closes the connection without an answer.
	DropAfterEffect
	// Slow waits DownstreamOptions.SlowFor (or until the caller gives up) before it applies the
	// request and answers.
	Slow
)

func (f Fault) String() string {
	switch f {
	case Fail500BeforeEffect:
		return "500 before the effect"
	case Fail500AfterEffect:
		return "500 after the effect"
	case DropAfterEffect:
		return "connection dropped after the effect"
	case Slow:
		return "slow answer"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// DownstreamOptions configure a recording downstream.
type DownstreamOptions struct {
	// Deduplicates makes it answer a repeated Idempotency-Key with the first answer and no
	// second effect, as Stripe does. Otherwise every request is an effect.
	Deduplicates bool
	// SlowFor is how long a Slow fault holds a request; default 2 seconds.
	SlowFor time.Duration
}

// Downstream is a recording HTTP downstream for tests (an httptest.Server): every request to
// any path is an effect — "eff_<n>" — applied once per Idempotency-Key when it deduplicates,
// and once per request when it does not. A request without the header is always a new effect.
// It answers 200 with {"id": "eff_<n>", "key": "<the key>"}. Point the activity's HTTP client
// at URL, and count effects with Effects.
type Downstream struct {
	// URL is the server's base URL.
	URL string

	opts     DownstreamOptions
	mu       sync.Mutex
	effects  map[string]int    // per key
	answers  map[string][]byte // the first answer per key, when deduplicating
	requests map[string]int    // per key
	total    int
	faults   []Fault
}

// NewDownstream starts a recording downstream, closed when tb ends.
func NewDownstream(tb testing.TB, opts *DownstreamOptions) *Downstream {
	tb.Helper()
	d := &Downstream{effects: map[string]int{}, answers: map[string][]byte{}, requests: map[string]int{}}
	if opts != nil {
		d.opts = *opts
	}
	if d.opts.SlowFor <= 0 {
		d.opts.SlowFor = 2 * time.Second
	}
	srv := httptest.NewServer(http.HandlerFunc(d.serve))
	tb.Cleanup(srv.Close)
	d.URL = srv.URL
	return d
}

// FailNext makes the next requests meet faults, one fault per request, in order.
func (d *Downstream) FailNext(faults ...Fault) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, faults...)
}

// Effects returns how many effects the downstream applied in all.
func (d *Downstream) Effects() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// EffectsFor returns how many effects were applied under key.
func (d *Downstream) EffectsFor(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.effects[key]
}

// Requests returns how many requests came with key ("" for those without one).
func (d *Downstream) Requests(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests[key]
}

// Keys returns the idempotency keys the downstream has seen, sorted.
func (d *Downstream) Keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.requests))
	for k := range d.requests {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (d *Downstream) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	d.mu.Lock()
	d.requests[key]++
	var fault Fault
	if len(d.faults) > 0 {
		fault, d.faults = d.faults[0], d.faults[1:]
	}
	d.mu.Unlock()

	switch fault {
	case Fail500BeforeEffect:
		http.Error(w, `{"error":"injected: 500 before the effect"}`, http.StatusInternalServerError)
		return
	case Slow:
		select {
		case <-time.After(d.opts.SlowFor):
		case <-r.Context().Done():
			return // the caller gave up; nothing applied
		}
	}
	answer := d.apply(key)
	switch fault {
	case Fail500AfterEffect:
		http.Error(w, `{"error":"injected: 500 after the effect"}`, http.StatusInternalServerError)
	case DropAfterEffect:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}
}

// apply records the effect of a request under key, or finds the one already applied, and
// returns the answer.
func (d *Downstream) apply(key string) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.Deduplicates && key != "" {
		if a, ok := d.answers[key]; ok {
			return a
		}
	}
	d.total++
	d.effects[key]++
	a, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("eff_%d", d.total), "key": key})
	if d.opts.Deduplicates && key != "" {
		d.answers[key] = a
	}
	return a
}
