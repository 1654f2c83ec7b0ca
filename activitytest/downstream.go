package activitytest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
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
	// Deduplicates makes it deduplicate on the Idempotency-Key as Stripe does: a repeated key
	// with the same request (method, path, query and body; a JSON or form body compared by its
	// values, not its bytes) gets the first answer and no second effect; with another request it
	// gets 400 idempotency_error and no effect; while the key's first request is still in flight,
	// 409. Otherwise every request is an effect.
	Deduplicates bool
	// AcceptChangedRequests makes a deduplicating downstream answer a repeated key with the
	// first answer whatever the request, as few real providers do. Leave it off unless yours
	// is one: an activity whose request changes between attempts (a timestamp, a random ID)
	// passes against it and fails against a provider that compares.
	AcceptChangedRequests bool
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
	effects  map[string]int      // per key
	paths    map[string]int      // effects per request path
	applied  map[string]response // the first request and answer per key, when deduplicating
	inFlight map[string]bool     // keys whose first request is being applied
	requests map[string]int      // per key
	total    int
	faultQueue
}

// faultQueue holds the faults asked for, one per request in order.
type faultQueue struct {
	mu     sync.Mutex
	faults []Fault
}

// FailNext makes the next requests meet faults, one fault per request, in order.
func (q *faultQueue) FailNext(faults ...Fault) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.faults = append(q.faults, faults...)
}

// next takes the fault for the request in hand: 0 when none is asked for.
func (q *faultQueue) next() Fault {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.faults) == 0 {
		return 0
	}
	f := q.faults[0]
	q.faults = q.faults[1:]
	return f
}

// response is what a deduplicating downstream remembers of a key's first request.
type response struct {
	request string // the request, in the form compared (canonicalRequest)
	answer  []byte
}

// NewDownstream starts a recording downstream, closed when tb ends.
func NewDownstream(tb testing.TB, opts *DownstreamOptions) *Downstream {
	tb.Helper()
	d := &Downstream{effects: map[string]int{}, paths: map[string]int{}, applied: map[string]response{}, inFlight: map[string]bool{}, requests: map[string]int{}}
	if opts != nil {
		d.opts = *opts
	}
	if d.opts.SlowFor <= 0 {
		d.opts.SlowFor = 2 * time.Second
	}
	if url, ok := inherited(tb, "downstream"); ok {
		d.URL = url // a worker process (see process.go) calls the first process's downstream
		return d
	}
	srv := httptest.NewServer(http.HandlerFunc(d.serve))
	tb.Cleanup(srv.Close)
	d.URL = srv.URL
	remember(tb, "downstream", d.URL)
	return d
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

// EffectsOn returns how many effects were applied by requests to path ("/v1/refunds"): a
// downstream of several endpoints, or a batch that sends each item to a path of its own.
func (d *Downstream) EffectsOn(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.paths[path]
}

// EffectsPer returns the effects applied by requests to paths under prefix, by the rest of the
// path: for a batch that sends item "s1" to "/v1/transfers/s1", EffectsPer("/v1/transfers/")
// returns {"s1": 1, …}, which is what Check.ItemEffects counts.
func (d *Downstream) EffectsPer(prefix string) map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for path, n := range d.paths {
		if item, ok := strings.CutPrefix(path, prefix); ok && item != "" {
			out[item] += n
		}
	}
	return out
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

// The answers of a deduplicating downstream to a repeated key that it does not apply, shaped
// as Stripe's (downstream.Check reads them as a payload mismatch and a request in flight).
const (
	answerChangedRequest = `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with (activitytest: this request differs from the first one sent under its Idempotency-Key)"}}`
	answerInFlight       = `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotency-Key; retry later"}}`
)

func (d *Downstream) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	request, err := canonicalRequest(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, fmt.Sprintf(`{"error":{"type":"invalid_request_error","message":%q}}`, err.Error()))
		return
	}
	fault := d.next()
	d.mu.Lock()
	d.requests[key]++
	dedup := d.opts.Deduplicates && key != ""
	if dedup {
		if first, ok := d.applied[key]; ok {
			d.mu.Unlock()
			if first.request != request && !d.opts.AcceptChangedRequests {
				writeJSON(w, http.StatusBadRequest, answerChangedRequest)
				return
			}
			writeJSON(w, http.StatusOK, string(first.answer))
			return
		}
		if d.inFlight[key] {
			d.mu.Unlock()
			writeJSON(w, http.StatusConflict, answerInFlight)
			return
		}
		if fault != Fail500BeforeEffect {
			d.inFlight[key] = true
		}
	}
	d.mu.Unlock()

	switch fault {
	case Fail500BeforeEffect:
		writeJSON(w, http.StatusInternalServerError, `{"error":{"type":"api_error","message":"injected: 500 before the effect"}}`)
		return
	case Slow:
		select {
		case <-time.After(d.opts.SlowFor):
		case <-r.Context().Done():
			d.mu.Lock()
			delete(d.inFlight, key)
			d.mu.Unlock()
			return // the caller gave up; nothing applied
		}
	}
	answer := d.apply(key, r.URL.Path, request)
	switch fault {
	case Fail500AfterEffect:
		writeJSON(w, http.StatusInternalServerError, `{"error":{"type":"api_error","message":"injected: 500 after the effect"}}`)
	case DropAfterEffect:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	default:
		writeJSON(w, http.StatusOK, string(answer))
	}
}

// apply records the effect of a request under key and returns the answer.
func (d *Downstream) apply(key, path, request string) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.total++
	d.effects[key]++
	d.paths[path]++
	a, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("eff_%d", d.total), "key": key})
	if d.opts.Deduplicates && key != "" {
		d.applied[key] = response{request: request, answer: a}
		delete(d.inFlight, key)
	}
	return a
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// canonicalRequest returns what a provider compares of r to tell a repeated request from
// another under one key: method, path, query, and the body's values (a JSON body with its
// objects' keys sorted, a form body sorted, other bodies as they are). It reads r's body.
func canonicalRequest(r *http.Request) (string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read the request body: %w", err)
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(body) == 0:
	case ct == "application/x-www-form-urlencoded":
		if v, err := url.ParseQuery(string(body)); err == nil {
			body = []byte(v.Encode())
		}
	case ct == "application/json" || json.Valid(body):
		var v any
		if err := json.Unmarshal(body, &v); err == nil {
			body, _ = json.Marshal(v) // maps marshal with sorted keys
		}
	}
	return r.Method + " " + r.URL.Path + "?" + r.URL.Query().Encode() + "\n" + string(body), nil
}
