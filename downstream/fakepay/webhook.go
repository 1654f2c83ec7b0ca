package fakepay

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// SignatureHeader carries the signature of a webhook delivery, in Stripe's scheme:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed with WebhookConfig.Secret>",
// where t is the time of that delivery and body the exact bytes sent.
const SignatureHeader = "Stripe-Signature"

// The types of the webhook events fakepay sends.
const (
	EventChargeSucceeded = "charge.succeeded"
	EventChargeFailed    = "charge.failed"
	EventChargeRefunded  = "charge.refunded"
)

// Defaults of WebhookConfig.
const (
	AsyncDelayDefault      = 200 * time.Millisecond
	WebhookRetryMinDefault = 50 * time.Millisecond
	WebhookRetryMaxDefault = 2 * time.Second
	WebhookMaxAgeDefault   = time.Hour
	WebhookTimeoutDefault  = 10 * time.Second
)

// WebhookConfig configures webhook events and the asynchronous confirmation of charges. The zero
// value sends no events; asynchronous charges still settle after AsyncDelayDefault.
//
// With a URL, every change of a charge creates one event, Stripe-shaped:
//
//	{"id": "evt_00000001", "object": "event", "type": "charge.succeeded", "created": <unix>,
//	 "data": {"object": <the charge as GET /v1/charges/{id} returned it at that moment>}}
//
// charge.succeeded when a charge succeeds (at once, or when an asynchronous one settles),
// charge.failed when an asynchronous one fails, charge.refunded when it is refunded. A
// synchronous decline creates no charge and so no event; a replayed answer creates none either.
//
// Each event is POSTed to the URL, signed (SignatureHeader), until the receiver answers 2xx:
// at least once, and in the order created unless Faults say otherwise. A delivery that fails
// (non-2xx, a network error, Timeout) is retried after a wait drawn at random below a ceiling
// that starts at RetryMin and doubles up to RetryMax, until
// it is MaxAge old; then it is given up (Ledger.Webhooks.Abandoned). Pending deliveries are part
// of the state, so with a StatePath a restarted fakepay keeps sending them.
type WebhookConfig struct {
	// URL receives the events; empty sends none.
	URL string
	// Secret signs the deliveries; required with URL.
	Secret string
	// AsyncDelay is how long a charge from source "tok_async" (succeeds) or "tok_asyncDeclined"
	// (fails) stays "processing"; default AsyncDelayDefault. It applies with or without a URL.
	AsyncDelay time.Duration
	// RetryMin is the longest wait after a delivery's first failed attempt (each wait is drawn
	// at random up to its ceiling); default WebhookRetryMinDefault.
	RetryMin time.Duration
	// RetryMax caps the ceiling of the wait between attempts; default WebhookRetryMaxDefault,
	// or RetryMin when that is longer.
	RetryMax time.Duration
	// MaxAge is how long a delivery is retried; default WebhookMaxAgeDefault.
	MaxAge time.Duration
	// Timeout bounds one attempt; default WebhookTimeoutDefault.
	Timeout time.Duration
	// EventIDPrefix starts every event ID, before its 8-digit number. Default "evt_" and a
	// random part chosen once per ledger (kept in the state file): event IDs are unique across
	// fakepay instances, as Stripe's are, so that a receiver that remembers the IDs of an
	// earlier run does not take a new event for a replay of an old one.
	EventIDPrefix string
}

// event is a webhook event as created; Body is the exact JSON every delivery of it sends.
type event struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
}

// eventBody is the JSON of an event, as Stripe shapes it.
type eventBody struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object *charge `json:"object"`
	} `json:"data"`
}

// delivery is one pending delivery of an event, retried until answered 2xx or MaxAge old.
type delivery struct {
	Event string `json:"event"`
	// Extra marks a duplicate or a replay: only an event's first delivery is duplicated.
	Extra    bool      `json:"extra,omitempty"`
	Attempts int       `json:"attempts"`
	Created  time.Time `json:"created"`
	Due      time.Time `json:"due"`
}

// webhookCounts are the webhook counts of the ledger; they are state, so they survive a restart.
type webhookCounts struct {
	Attempts  int            `json:"attempts"`
	Answered  map[string]int `json:"answered"` // event ID → 2xx answers
	Abandoned int            `json:"abandoned"`
}

// idle is how long the background goroutines sleep when nothing is scheduled; new work wakes them.
const idle = time.Hour

// emit creates an event of typ for c as it is now and queues its delivery. It is called under
// s.mu where a charge changes, so each change makes one event and a replayed answer none.
func (s *Server) emit(typ string, c *charge) {
	if s.cfg.Webhooks.URL == "" {
		return
	}
	prefix := s.cfg.Webhooks.EventIDPrefix
	if prefix == "" {
		prefix = "evt_" + s.st.Instance + "_"
	}
	b := eventBody{ID: fmt.Sprintf("%s%08d", prefix, len(s.st.Events)+1), Object: "event", Type: typ, Created: time.Now().Unix()}
	b.Data.Object = c
	raw, _ := json.Marshal(b)
	s.st.Events = append(s.st.Events, &event{ID: b.ID, Type: typ, Body: raw})
	s.enqueue(b.ID, 1, false)
}

// enqueue queues n deliveries of the event id, each held for a random time up to the
// WebhookDelay fault, and wakes the sender. It is called under s.mu.
func (s *Server) enqueue(id string, n int, extra bool) []*delivery {
	now := time.Now()
	added := make([]*delivery, n)
	for i := range added {
		added[i] = &delivery{Event: id, Extra: extra, Created: now, Due: now.Add(upTo(s.st.Faults.WebhookDelay))}
	}
	s.st.Deliveries = append(s.st.Deliveries, added...)
	s.background()
	notify(s.wakeSender)
	return added
}

// sender sends the due deliveries, one step at a time, until ctx is done. One at a time keeps
// the events in order unless a fault shuffles them.
func (s *Server) sender(ctx context.Context) {
	defer s.wg.Done()
	for {
		step, wait := s.nextStep()
		if len(step) == 0 {
			if !sleep(ctx, wait, s.wakeSender) {
				return
			}
			continue
		}
		var wg sync.WaitGroup
		for _, d := range step {
			wg.Go(func() { s.attempt(ctx, d) })
		}
		wg.Wait()
	}
}

// nextStep picks the deliveries to send now: the first due one in queue order (a random one
// with WebhookReorder), together with a duplicate when WebhookDuplicate asks for some. With
// nothing due, it returns how long until something is.
func (s *Server) nextStep() ([]*delivery, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Webhooks.URL == "" {
		return nil, idle // deliveries left by a run that had a URL wait for one that has
	}
	now := time.Now()
	wait := idle
	var due []*delivery
	for _, d := range s.st.Deliveries {
		if d.Due.After(now) {
			wait = min(wait, d.Due.Sub(now))
			continue
		}
		due = append(due, d)
	}
	if len(due) == 0 {
		return nil, wait
	}
	d := due[0]
	if s.st.Faults.WebhookReorder {
		d = due[rand.IntN(len(due))]
	}
	step := []*delivery{d}
	if n := s.st.Faults.WebhookDuplicate; n > 0 && !d.Extra && d.Attempts == 0 {
		// The first copy goes out with the original, so the receiver sees both at once; the
		// others queue behind, each delivered at least once like any delivery.
		copies := s.enqueue(d.Event, n, true)
		copies[0].Due = now
		step = append(step, copies[0])
	}
	return step, 0
}

// attempt sends d once and records the outcome: done on a 2xx (unless WebhookFail treats the
// answer as lost), given up when MaxAge old, else retried after a backoff.
func (s *Server) attempt(ctx context.Context, d *delivery) {
	s.mu.Lock()
	body := s.findEvent(d.Event).Body
	lost := s.st.Faults.WebhookFail > 0 && s.nth("webhook_fail", d.Event) <= s.st.Faults.WebhookFail
	s.mu.Unlock()

	ok := s.post2xx(ctx, body)

	s.mu.Lock()
	defer s.mu.Unlock()
	d.Attempts++
	s.st.Webhooks.Attempts++
	if ok {
		s.st.Webhooks.Answered[d.Event]++
	}
	switch {
	case ok && !lost:
		s.dropDelivery(d)
	case time.Since(d.Created) >= s.cfg.Webhooks.MaxAge:
		s.dropDelivery(d)
		s.st.Webhooks.Abandoned++
	default:
		d.Due = time.Now().Add(retryWait(d.Attempts, s.cfg.Webhooks.RetryMin, s.cfg.Webhooks.RetryMax))
	}
	s.save()
}

// post2xx POSTs body, signed now, to the webhook URL and reports whether it was answered 2xx.
func (s *Server) post2xx(ctx context.Context, body []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Webhooks.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.Webhooks.URL, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, sign(s.cfg.Webhooks.Secret, time.Now(), body))
	resp, err := s.webhookHTTP.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// newWebhookHTTP returns the client of the deliveries: its own connections, so that Close can
// close them, and no redirects, which Stripe does not follow either (a 3xx is a failed attempt).
func newWebhookHTTP() *http.Client {
	return &http.Client{
		Transport:     http.DefaultTransport.(*http.Transport).Clone(),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// sign returns the SignatureHeader value of body sent at t, as Stripe computes it.
func sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// retryWait is the wait after a delivery's attempts-th failed attempt, drawn with full jitter
// from (0, backoff]: deliveries that failed together (a receiver that was down) do not all come
// back together.
func retryWait(attempts int, first, limit time.Duration) time.Duration {
	return 1 + upTo(backoff(attempts, first, limit))
}

// backoff is the ceiling of the wait after a delivery's attempts-th failed attempt: first,
// doubled per earlier failure, capped at limit.
func backoff(attempts int, first, limit time.Duration) time.Duration {
	d := first
	for i := 1; i < attempts && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (s *Server) dropDelivery(d *delivery) {
	s.st.Deliveries = slices.DeleteFunc(s.st.Deliveries, func(x *delivery) bool { return x == d })
}

func (s *Server) findEvent(id string) *event {
	for _, e := range s.st.Events {
		if e.ID == id {
			return e
		}
	}
	return nil
}

// replay serves POST /webhooks/replay: {"event":"evt_..."} queues one more delivery of that
// event, {"all":true} one of every event. The deliveries send the stored body again, under a
// fresh signature; they are extras, so WebhookDuplicate does not copy them.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Event string `json:"event"`
		All   bool   `json:"all"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || (req.Event != "") == req.All {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", `replay takes either {"event":"evt_..."} or {"all":true}`)
		return
	}
	s.mu.Lock()
	status, body := s.queueReplay(req.Event, req.All)
	s.mu.Unlock()
	writeJSON(w, status, body)
}

// queueReplay queues the deliveries of a replay and returns its answer.
func (s *Server) queueReplay(id string, all bool) (int, any) {
	if s.cfg.Webhooks.URL == "" {
		return http.StatusBadRequest, errorBody("invalid_request_error", "", "fakepay sends no webhooks: set Config.Webhooks.URL (-webhook-url)")
	}
	events := s.st.Events
	if !all {
		e := s.findEvent(id)
		if e == nil {
			return http.StatusNotFound, errorBody("invalid_request_error", "resource_missing", "No such event: "+id)
		}
		events = []*event{e}
	}
	ids := []string{}
	for _, e := range events {
		s.enqueue(e.ID, 1, true)
		ids = append(ids, e.ID)
	}
	s.save()
	return http.StatusOK, map[string]any{"replayed": ids}
}

// sleep waits for d, a wake-up or the end of ctx, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

// notify wakes the goroutine that sleeps on wake, without waiting for it: a wake-up already
// pending covers this one too.
func notify(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// upTo returns a random duration in [0, d), or 0.
func upTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
