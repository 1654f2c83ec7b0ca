package fakepay

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tempotent/tempotent/downstream"
)

// RetentionDefault is how long fakepay remembers an idempotency key, as Stripe does.
const RetentionDefault = 24 * time.Hour

// Config configures a Server. The zero Config (or nil) keeps its state in memory.
type Config struct {
	// StatePath, when set, is a JSON file that holds the ledger and the stored responses. It is
	// read at start and rewritten (atomically, fsynced) after every change, so a fakepay process
	// that is restarted keeps its ledger and its idempotency memory.
	StatePath string
	// Retention is how long a key's stored response is kept; default RetentionDefault.
	Retention time.Duration
	// Faults apply to every request, merged with the request's own FaultHeader.
	Faults Faults
	// Webhooks configures webhook events and asynchronous charges; see WebhookConfig.
	Webhooks WebhookConfig
}

// withDefaults returns c with its defaults applied.
func (c Config) withDefaults() Config {
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	w := &c.Webhooks
	w.AsyncDelay = cmp.Or(w.AsyncDelay, AsyncDelayDefault)
	w.RetryMin = cmp.Or(w.RetryMin, WebhookRetryMinDefault)
	w.RetryMax = cmp.Or(w.RetryMax, max(WebhookRetryMaxDefault, w.RetryMin))
	w.MaxAge = cmp.Or(w.MaxAge, WebhookMaxAgeDefault)
	w.Timeout = cmp.Or(w.Timeout, WebhookTimeoutDefault)
	return c
}

// validate names the first field of c (with defaults) that cannot work.
func (c Config) validate() error {
	w := c.Webhooks
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"Retention", c.Retention}, {"Webhooks.AsyncDelay", w.AsyncDelay}, {"Webhooks.RetryMin", w.RetryMin},
		{"Webhooks.RetryMax", w.RetryMax}, {"Webhooks.MaxAge", w.MaxAge}, {"Webhooks.Timeout", w.Timeout},
	} {
		if f.d < 0 {
			return fmt.Errorf("fakepay: Config.%s cannot be less than zero, got %v", f.name, f.d)
		}
	}
	if w.RetryMax < w.RetryMin {
		return fmt.Errorf("fakepay: Config.Webhooks.RetryMax (%v) cannot be less than RetryMin (%v)", w.RetryMax, w.RetryMin)
	}
	if w.URL == "" {
		return nil
	}
	if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("fakepay: Config.Webhooks.URL %q is not an http or https URL", w.URL)
	}
	if w.Secret == "" {
		return errors.New("fakepay: Config.Webhooks.Secret is required with Webhooks.URL: every delivery is signed with it")
	}
	return nil
}

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

// state is what survives a restart when StatePath is set.
type state struct {
	// Instance tells this ledger's event IDs from another's (WebhookConfig.EventIDPrefix).
	Instance string            `json:"instance"`
	Seq      int               `json:"seq"`
	Charges  []*charge         `json:"charges"`
	Refunds  []*refund         `json:"refunds"`
	Keys     map[string]*entry `json:"keys"`
	Faults   Faults            `json:"faults"`

	Settling   []settlement  `json:"settling,omitempty"`   // processing charges, in the order made
	Events     []*event      `json:"events,omitempty"`     // every webhook event, in the order created
	Deliveries []*delivery   `json:"deliveries,omitempty"` // pending, in the order queued
	Webhooks   webhookCounts `json:"webhooks"`
}

type charge struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Source      string            `json:"source"`
	Description string            `json:"description,omitempty"`
	Status      string            `json:"status"`
	Refunded    bool              `json:"refunded"`
	Metadata    map[string]string `json:"metadata"`
	Key         string            `json:"idempotency_key"`
}

type refund struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Charge   string `json:"charge"`
	Amount   int64  `json:"amount"`
	Status   string `json:"status"`
	Key      string `json:"idempotency_key"`
	Currency string `json:"currency"`
}

// entry is a stored response.
type entry struct {
	Request string          `json:"request"` // method, path and canonical parameters
	Status  int             `json:"status"`
	Body    json.RawMessage `json:"body"`
	Created time.Time       `json:"created"`
}

// New returns a Server, loading its state from cfg.StatePath when that file exists. When that
// state has pending webhook deliveries or processing charges, their goroutines start at once.
func New(cfg *Config) (*Server, error) {
	s := &Server{inFlight: map[string]bool{}, faultN: map[string]int{}, requests: map[string]int{}, conflicts: map[string]int{},
		st:         state{Keys: map[string]*entry{}, Webhooks: webhookCounts{Answered: map[string]int{}}},
		wakeSender: make(chan struct{}, 1), wakeSettler: make(chan struct{}, 1), webhookHTTP: newWebhookHTTP()}
	if cfg != nil {
		s.cfg = *cfg
	}
	s.cfg = s.cfg.withDefaults()
	if err := s.cfg.validate(); err != nil {
		return nil, err
	}
	if s.cfg.StatePath != "" {
		raw, err := os.ReadFile(s.cfg.StatePath)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("fakepay: read state: %w", err)
		default:
			if err := json.Unmarshal(raw, &s.st); err != nil {
				return nil, fmt.Errorf("fakepay: state file %s is not fakepay state: %w", s.cfg.StatePath, err)
			}
			if s.st.Keys == nil {
				s.st.Keys = map[string]*entry{}
			}
			if s.st.Webhooks.Answered == nil {
				s.st.Webhooks.Answered = map[string]int{}
			}
		}
	}
	if s.st.Instance == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		s.st.Instance = hex.EncodeToString(b[:])
	}
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
		c := s.findCharge(chargePath.FindStringSubmatch(r.URL.Path)[1])
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
		if e, ok := s.st.Keys[key]; ok && time.Since(e.Created) > s.cfg.Retention {
			delete(s.st.Keys, key)
		}
		if s.inFlight[key] {
			s.conflicts[key]++
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "idempotency_error", "idempotency_key_in_use", "There is currently another in-progress request using this Idempotency-Key; retry later")
			return
		}
		if e, ok := s.st.Keys[key]; ok {
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
		s.st.Keys[key] = &entry{Request: request, Status: status, Body: raw, Created: time.Now()}
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

func (s *Server) charge(key string, form url.Values, decline bool) (int, any) {
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	switch {
	case err != nil || amount <= 0:
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_invalid_integer", "amount must be a positive integer")
	case form.Get("currency") == "":
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_missing", "Missing required param: currency")
	case form.Get("source") == "":
		return http.StatusBadRequest, errorBody("invalid_request_error", "parameter_missing", "Missing required param: source")
	case decline || form.Get("source") == "tok_chargeDeclined":
		return http.StatusPaymentRequired, errorBody("card_error", "card_declined", "Your card was declined.")
	}
	s.st.Seq++
	c := &charge{
		ID: fmt.Sprintf("ch_%08d", s.st.Seq), Object: "charge", Amount: amount, Currency: form.Get("currency"),
		Source: form.Get("source"), Description: form.Get("description"), Status: "succeeded",
		Metadata: metadata(form), Key: key,
	}
	s.st.Charges = append(s.st.Charges, c)
	if _, async := asyncSources[c.Source]; async {
		s.startProcessing(c)
	} else {
		s.emit(EventChargeSucceeded, c)
	}
	return http.StatusOK, c
}

func (s *Server) refund(key string, form url.Values) (int, any) {
	c := s.findCharge(form.Get("charge"))
	switch {
	case c == nil:
		return http.StatusNotFound, errorBody("invalid_request_error", "resource_missing", "No such charge: "+form.Get("charge"))
	case c.Refunded:
		return http.StatusBadRequest, errorBody("invalid_request_error", "charge_already_refunded", "Charge "+c.ID+" has already been refunded.")
	case c.Status == "processing":
		return http.StatusBadRequest, errorBody("invalid_request_error", "charge_not_settled", "Charge "+c.ID+" is still processing; refund it once it has succeeded.")
	case c.Status == "failed":
		return http.StatusBadRequest, errorBody("invalid_request_error", "charge_not_refundable", "Charge "+c.ID+" failed; there is nothing to refund.")
	}
	s.st.Seq++
	c.Refunded = true
	rf := &refund{ID: fmt.Sprintf("re_%08d", s.st.Seq), Object: "refund", Charge: c.ID, Amount: c.Amount, Currency: c.Currency, Status: "succeeded", Key: key}
	s.st.Refunds = append(s.st.Refunds, rf)
	s.emit(EventChargeRefunded, c)
	return http.StatusOK, rf
}

var searchQuery = regexp.MustCompile(`^metadata\['([A-Za-z0-9_]+)'\]:'([^']*)'$`)

func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	m := searchQuery.FindStringSubmatch(r.URL.Query().Get("query"))
	if m == nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "fakepay searches only metadata['field']:'value'")
		return
	}
	s.mu.Lock()
	data := []*charge{}
	for _, c := range s.st.Charges {
		if c.Metadata[m[1]] == m[2] {
			data = append(data, c)
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "search_result", "data": data, "has_more": false, "url": "/v1/charges/search"})
}

func (s *Server) findCharge(id string) *charge {
	for _, c := range s.st.Charges {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// Ledger is every effect fakepay applied, for tests and the demo's summary.
type Ledger struct {
	Charges []LedgerCharge `json:"charges"`
	Refunds []LedgerRefund `json:"refunds"`
	// ChargesByToken counts charges per tempotent token (metadata), whatever their status: more
	// than one is a duplicate charge of one intent.
	ChargesByToken map[string]int `json:"charges_by_token"`
	// RefundsByCharge counts refunds per charge: more than one is a duplicate refund.
	RefundsByCharge map[string]int `json:"refunds_by_charge"`
	// RequestsByKey counts the POSTs received per idempotency key since this process started,
	// faulted and replayed ones included: how often a caller came back with the same key.
	RequestsByKey map[string]int `json:"requests_by_key"`
	// ConflictsByKey counts the 409s answered per idempotency key since this process started:
	// duplicates that arrived while the key's first request was in flight.
	ConflictsByKey map[string]int `json:"conflicts_by_key"`
	// Webhooks counts the webhook events and their deliveries.
	Webhooks LedgerWebhooks `json:"webhooks"`
}

// LedgerWebhooks counts webhook events and their deliveries. The counts are part of the state,
// so, unlike RequestsByKey, they survive a restart.
type LedgerWebhooks struct {
	// EventsByType counts the events created per type: one per change of a charge.
	EventsByType map[string]int `json:"events_by_type"`
	// Attempts counts the deliveries sent, whatever became of them.
	Attempts int `json:"attempts"`
	// Delivered counts the attempts answered 2xx, those that WebhookFail then treated as lost
	// included: each one the receiver accepted.
	Delivered int `json:"delivered"`
	// DeliveredByEvent counts the 2xx answers per event ID: more than one is a duplicate that
	// the receiver had to absorb.
	DeliveredByEvent map[string]int `json:"delivered_by_event"`
	// Pending counts the deliveries queued or waiting for a retry.
	Pending int `json:"pending"`
	// Abandoned counts the deliveries given up, unanswered, after WebhookConfig.MaxAge.
	Abandoned int `json:"abandoned"`
}

// LedgerCharge is one charge in the ledger.
type LedgerCharge struct {
	ID          string `json:"id"`
	Description string `json:"description,omitempty"`
	Key         string `json:"idempotency_key"`
	Token       string `json:"token"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Status      string `json:"status"` // "succeeded", or "processing" and "failed" for an asynchronous charge
	Refunded    bool   `json:"refunded"`
}

// LedgerRefund is one refund in the ledger.
type LedgerRefund struct {
	ID     string `json:"id"`
	Key    string `json:"idempotency_key"`
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

// RefundsOfToken counts the refunds of the charges made under a tempotent token.
func (l Ledger) RefundsOfToken(token string) int {
	n := 0
	for _, c := range l.Charges {
		if c.Token == token {
			n += l.RefundsByCharge[c.ID]
		}
	}
	return n
}

// Ledger returns a copy of the ledger.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := Ledger{Charges: []LedgerCharge{}, Refunds: []LedgerRefund{}, ChargesByToken: map[string]int{}, RefundsByCharge: map[string]int{}, RequestsByKey: maps.Clone(s.requests),
		ConflictsByKey: maps.Clone(s.conflicts)}
	for _, c := range s.st.Charges {
		tok := c.Metadata[downstream.TokenMetadataKey]
		l.Charges = append(l.Charges, LedgerCharge{ID: c.ID, Description: c.Description, Key: c.Key, Token: tok, Amount: c.Amount, Currency: c.Currency,
			Status: c.Status, Refunded: c.Refunded})
		if tok != "" {
			l.ChargesByToken[tok]++
		}
	}
	for _, r := range s.st.Refunds {
		l.Refunds = append(l.Refunds, LedgerRefund{ID: r.ID, Key: r.Key, Charge: r.Charge, Amount: r.Amount})
		l.RefundsByCharge[r.Charge]++
	}
	l.Webhooks = s.webhookLedger()
	return l
}

func (s *Server) webhookLedger() LedgerWebhooks {
	l := LedgerWebhooks{EventsByType: map[string]int{}, Attempts: s.st.Webhooks.Attempts, DeliveredByEvent: maps.Clone(s.st.Webhooks.Answered),
		Pending: len(s.st.Deliveries), Abandoned: s.st.Webhooks.Abandoned}
	for _, e := range s.st.Events {
		l.EventsByType[e.Type]++
	}
	for _, n := range l.DeliveredByEvent {
		l.Delivered += n
	}
	return l
}

// save writes the state file, if any: to a temporary file, fsynced, then renamed over the old
// one, so a crash leaves the old state or the new one, never half of either.
func (s *Server) save() {
	if s.cfg.StatePath == "" {
		return
	}
	raw, err := json.Marshal(s.st)
	if err == nil {
		err = writeFileAtomic(s.cfg.StatePath, raw)
	}
	if err != nil {
		// A fake provider that cannot keep its ledger must not pretend to: fail loudly.
		panic(fmt.Sprintf("fakepay: save state to %s: %v", s.cfg.StatePath, err))
	}
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fakepay-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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
