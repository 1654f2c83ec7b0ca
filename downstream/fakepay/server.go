package fakepay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tempotent/tempotent/downstream"
)

// Server is a fake payment provider with Stripe's idempotency contract, speaking a subset of
// Stripe's API (form-encoded requests, Stripe-shaped JSON):
//
//	POST /v1/charges            amount, currency, source, description, metadata[k]
//	POST /v1/refunds            charge
//	GET  /v1/charges/{id}
//	GET  /v1/charges/search     query=metadata['tempotent_token']:'<token>'
//	GET  /ledger                every charge and refund, counts per key and per token, webhook counts
//	PUT  /faults                set the run's Faults (JSON)
//	POST /webhooks/replay       {"event":"evt_..."} or {"all":true}: send events again (JSON)
//
// Every POST to /v1 needs an Idempotency-Key. The first response per key (declines and stored
// 500s too) is stored and replayed; a request that reuses a key with other parameters gets 400
// idempotency_error; a duplicate that arrives while the first is in flight gets 409; keys are
// forgotten after the retention. (The fault ignore_keys turns all of this off, for a provider
// that does not deduplicate.) The source "tok_chargeDeclined" declines, as in Stripe's test
// mode. Refunding an already refunded charge answers charge_already_refunded.
//
// The sources "tok_async" and "tok_asyncDeclined" make a charge that is answered (and stored)
// as "processing" and becomes "succeeded" or "failed" after WebhookConfig.AsyncDelay; GET and
// search show its status of the moment. Refunding a processing charge answers 400
// charge_not_settled (retry once it has succeeded); refunding a failed one answers 400
// charge_not_refundable. With WebhookConfig.URL, each change of a charge is sent as a signed,
// Stripe-shaped webhook event (see WebhookConfig); POST /webhooks/replay sends events again.
//
// Webhooks and asynchronous charges run in background goroutines, started when first needed;
// call Close to stop them.
type Server struct {
	cfg Config

	mu        sync.Mutex
	st        state
	inFlight  map[string]bool
	faultN    map[string]int // "<fault>/<key>" → times applied
	requests  map[string]int // idempotency key → POSTs received since start
	conflicts map[string]int // idempotency key → 409s answered since start

	// The background goroutines: the webhook sender and the settler of processing charges.
	ctx         context.Context // cancelled by Close
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	started     bool // under mu
	closed      bool // under mu
	wakeSender  chan struct{}
	wakeSettler chan struct{}
	webhookHTTP *http.Client
}

// New returns a Server, loading its state from cfg.StatePath when that file exists. When that
// state has pending webhook deliveries or processing charges, their goroutines start at once.
func New(cfg *Config) (*Server, error) {
	s := &Server{inFlight: map[string]bool{}, faultN: map[string]int{}, requests: map[string]int{}, conflicts: map[string]int{},
		wakeSender: make(chan struct{}, 1), wakeSettler: make(chan struct{}, 1), webhookHTTP: newWebhookHTTP()}
	if cfg != nil {
		s.cfg = *cfg
	}
	s.cfg = s.cfg.withDefaults()
	if err := s.cfg.validate(); err != nil {
		return nil, err
	}
	st, err := loadState(s.cfg.StatePath)
	if err != nil {
		return nil, err
	}
	s.st = st
	s.st.Faults = s.st.Faults.merge(s.cfg.Faults)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if len(s.st.Settling) > 0 || len(s.st.Deliveries) > 0 {
		s.background()
	}
	return s, nil
}

// background starts the webhook sender and the settler the first time there is work for them,
// so that a Server that never has any needs no Close. It is called under s.mu (or before s is
// shared).
func (s *Server) background() {
	if s.started || s.closed {
		return
	}
	s.started = true
	s.wg.Add(2)
	go s.sender(s.ctx)
	go s.settler(s.ctx)
}

// Close stops the webhook sender and the settler, and waits for them; an attempt in flight is
// cancelled and counts as failed. What they leave stays in the state: a Server started on the
// same StatePath sends the pending deliveries and settles the processing charges. Requests are
// still served after Close, but their deliveries and settlements wait for that next Server.
// Close is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.webhookHTTP.CloseIdleConnections()
}

var chargePath = regexp.MustCompile(`^/v1/charges/(ch_[A-Za-z0-9]+)$`)

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/ledger":
		writeJSON(w, http.StatusOK, s.Ledger())
	case r.Method == http.MethodPut && r.URL.Path == "/faults":
		var f Faults
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "faults: "+err.Error())
			return
		}
		s.mu.Lock()
		s.st.Faults = f
		s.save()
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, f)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/charges/search":
		s.search(w, r)
	case r.Method == http.MethodGet && chargePath.MatchString(r.URL.Path):
		s.mu.Lock()
		c := s.st.findCharge(chargePath.FindStringSubmatch(r.URL.Path)[1])
		s.mu.Unlock()
		if c == nil {
			writeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such charge")
			return
		}
		writeJSON(w, http.StatusOK, c)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/charges" || r.URL.Path == "/v1/refunds"):
		s.post(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/webhooks/replay":
		s.replay(w, r)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "unknown endpoint "+r.Method+" "+r.URL.Path)
	}
}

// post runs the idempotency layer around a state-changing endpoint.
func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(downstream.HeaderDefault)
	if key == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "idempotency_key_required", "fakepay requires an Idempotency-Key on every POST")
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	faults, err := ParseFaults(r.Header.Get(FaultHeader))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}

	s.mu.Lock()
	s.requests[key]++
	faults = s.st.Faults.merge(faults)
	// Faults in front of the provider: nothing is executed or stored.
	if faults.Fail500 > 0 && s.nth("fail_500", key) <= faults.Fail500 {
		s.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "api_error", "", "injected 500 (nothing happened)")
		return
	}
	if faults.RateLimit > 0 && s.nth("rate_limit", key) <= faults.RateLimit {
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(max(faults.RetryAfter, time.Second)/time.Second)))
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "rate_limit", "Too many requests")
		return
	}

	request := r.Method + " " + r.URL.Path + " " + r.PostForm.Encode() // Encode sorts by key
	dedup := !faults.IgnoreKeys
	if dedup {
		e, stored := s.st.recall(key, time.Now(), s.cfg.Retention)
		if s.inFlight[key] {
			s.conflicts[key]++
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "idempotency_error", "idempotency_key_in_use", "There is currently another in-progress request using this Idempotency-Key; retry later")
			return
		}
		if stored {
			s.mu.Unlock()
			if e.Request != request {
				writeError(w, http.StatusBadRequest, "idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with")
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			writeRaw(w, e.Status, e.Body)
			return
		}
		s.inFlight[key] = true
	}
	drop := faults.Drop > 0 && s.nth("drop", key) <= faults.Drop
	s.mu.Unlock()

	if faults.Slow > 0 {
		time.Sleep(faults.Slow)
	}

	s.mu.Lock()
	var status int
	var body any
	if r.URL.Path == "/v1/charges" {
		status, body = s.charge(key, r.PostForm, faults.Decline)
	} else {
		status, body = s.refund(key, r.PostForm)
	}
	raw, _ := json.Marshal(body)
	if dedup {
		s.st.remember(key, request, status, raw, time.Now())
		delete(s.inFlight, key)
	}
	s.save()
	s.mu.Unlock()

	if drop {
		// Applied and recorded, but the answer is lost: the caller sees a broken connection.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	}
	writeRaw(w, status, raw)
}

// nth counts one more request of key for fault and returns the count.
func (s *Server) nth(fault, key string) int {
	s.faultN[fault+"/"+key]++
	return s.faultN[fault+"/"+key]
}

// charge checks a charge's parameters and records it in the ledger, starting an asynchronous
// source's charge processing, else sending its charge.succeeded event.
func (s *Server) charge(key string, form url.Values, decline bool) (int, any) {
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	switch {
	case err != nil || amount <= 0:
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_invalid_integer", "amount must be a positive integer")
	case form.Get("currency") == "":
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_missing", "Missing required param: currency")
	case form.Get("source") == "":
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_missing", "Missing required param: source")
	}
	c, refused := s.st.charge(key, chargeRequest{Amount: amount, Currency: form.Get("currency"), Source: form.Get("source"),
		Description: form.Get("description"), Metadata: metadata(form)}, decline)
	if refused != nil {
		return refused.answer()
	}
	if _, async := asyncSources[c.Source]; async {
		s.startProcessing(c)
	} else {
		s.emit(EventChargeSucceeded, c)
	}
	return http.StatusOK, c
}

// refund records the refund of the charge the form names, and sends its charge.refunded event.
func (s *Server) refund(key string, form url.Values) (int, any) {
	rf, c, refused := s.st.refund(key, form.Get("charge"))
	if refused != nil {
		return refused.answer()
	}
	s.emit(EventChargeRefunded, c)
	return http.StatusOK, rf
}

// answer is the HTTP status and body of a refusal of the ledger, as Stripe answers it.
func (r *refusal) answer() (int, any) {
	status := http.StatusBadRequest
	switch r.kind {
	case refusedDeclined:
		status = http.StatusPaymentRequired
	case refusedMissing:
		status = http.StatusNotFound
	}
	return status, errorBody(r.typ, r.code, r.message)
}

var searchQuery = regexp.MustCompile(`^metadata\['([A-Za-z0-9_]+)'\]:'([^']*)'$`)

func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	m := searchQuery.FindStringSubmatch(r.URL.Query().Get("query"))
	if m == nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "fakepay searches only metadata['field']:'value'")
		return
	}
	s.mu.Lock()
	data := s.st.chargesWithMetadata(m[1], m[2])
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "search_result", "data": data, "has_more": false, "url": "/v1/charges/search"})
}

// Ledger returns a copy of the ledger.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.st.ledger()
	l.RequestsByKey, l.ConflictsByKey = maps.Clone(s.requests), maps.Clone(s.conflicts)
	return l
}

// save writes the state file, if any (see state.write).
func (s *Server) save() {
	if s.cfg.StatePath == "" {
		return
	}
	if err := s.st.write(s.cfg.StatePath); err != nil {
		// A fake provider that cannot keep its ledger must not pretend to: fail loudly.
		panic(fmt.Sprintf("fakepay: save state to %s: %v", s.cfg.StatePath, err))
	}
}

func metadata(form url.Values) map[string]string {
	md := map[string]string{}
	for k, v := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") && len(v) > 0 {
			md[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	return md
}

func errorBody(typ, code, msg string) map[string]any {
	e := map[string]string{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	return map[string]any{"error": e}
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, errorBody(typ, code, msg))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, _ := json.Marshal(v)
	writeRaw(w, status, raw)
}

func writeRaw(w http.ResponseWriter, status int, raw []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}
