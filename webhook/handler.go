package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/telemetry"
)

// Defaults applied by NewHandler.
const (
	// MaxBodyBytesDefault bounds a delivery's body; Stripe's events are far smaller.
	MaxBodyBytesDefault = 1 << 20
	// RetentionDefault is how long a delivery ID is remembered: past it, a redelivery is a new
	// event. Providers retry for days (Stripe for three) and operators resend by hand later.
	RetentionDefault = 30 * 24 * time.Hour
)

// Headers of the outbox message that an accepted delivery becomes, beside its body as payload.
const (
	HeaderSource = "Webhook-Source"
	// HeaderTenant is outbox.HeaderTenant, which outbox.TemporalPublisher reads to run the
	// workflow it starts, signals or updates under the delivery's tenant.
	HeaderTenant    = outbox.HeaderTenant
	HeaderID        = "Webhook-Delivery-Id"
	HeaderEventType = "Webhook-Event-Type"
)

// Metric names, counted through HandlerConfig.Metrics with the tag "source"
// (telemetry.MetricTagSource). They are the telemetry package's, which names every metric of the
// toolkit.
const (
	MetricAccepted  = telemetry.WebhookAccepted  // a new delivery, stored
	MetricDuplicate = telemetry.WebhookDuplicate // a delivery seen before, answered 2xx, nothing stored
	MetricRefused   = telemetry.WebhookRefused   // a 4xx: forged, stale, oversized, malformed (tag "reason")
	MetricFailed    = telemetry.WebhookFailed    // a 5xx: not stored (tag "reason": "store", or "topic"); the provider retries
)

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Source names the provider ("stripe", "fakepay"): deduplication is per tenant and source.
	// Lower-case letters, digits, '.', '_' and '-'. Required.
	Source string
	// Verifier checks every delivery's signature before anything of its body is used.
	// Required, unless VerifierFor is set.
	Verifier Verifier
	// Tenant gives the tenant a request is for from its URL or headers (never its body, which
	// is not verified yet); nil means one tenant (""). An error answers 404, nothing stored.
	Tenant func(*http.Request) (string, error)
	// VerifierFor, when set, gives each tenant's verifier (each tenant's endpoint has its own
	// secrets) instead of Verifier. An error answers 404, nothing stored.
	VerifierFor func(tenant string) (Verifier, error)
	// Topic is the outbox topic of accepted deliveries. Default "webhook." + Source.
	//
	// Deliveries are remembered per tenant and Source, not per Topic: a second handler of the
	// same Source with another Topic would take every delivery the first has taken as a
	// duplicate, and its topic would never get it. So each endpoint needs a Source of its own
	// ("stripe-billing", "stripe-shipping"). NewHandler refuses a second topic for a Source when
	// the first handler was built in the same process on the same database and schema; across
	// processes, the first handler to take a delivery records its Source's topic in the
	// schema's webhook_endpoints table, and a handler with another topic answers every
	// delivery 500 (ErrTopicConflict, logged and counted as MetricFailed with the reason
	// "topic"), storing nothing, so that the provider retries until the conflict is resolved.
	Topic string
	// MaxBodyBytes bounds a body; a larger one is answered 413. Default MaxBodyBytesDefault, or
	// the outbox's MaxPayloadBytes when that is smaller. NewHandler refuses a limit above the
	// outbox's (a *ConfigError): the body is stored as the message's payload, so a body between
	// the two would be answered 503 on every retry.
	MaxBodyBytes int64
	// Retention is how long delivery IDs are remembered; see RetentionDefault. It must be at
	// least twice the verifier's signature tolerance (Stripe and StandardWebhooks Tolerance):
	// a delivery is taken when its signed time is within the tolerance of now, either way, so
	// its replay passes the verifier for up to twice the tolerance, and must still find its ID.
	// NewHandler refuses a shorter one (a *ConfigError; for VerifierFor's verifiers, the
	// request is answered 404). GitHub signs no timestamp: no retention keeps a replay of a
	// GitHub delivery out for ever (see GitHub), and none is refused.
	Retention time.Duration
	// Now is the clock that signature timestamps are checked against. Default time.Now.
	Now func() time.Time
	// Metrics receives the Metric counters. Default: none.
	Metrics client.MetricsHandler
	// TallyEvery is how often, at most, the handler adds what it counted (deliveries accepted,
	// duplicate, refused by reason, failed) to the schema's webhook_tallies table, which
	// tempotent webhooks and the console read (operator.Client.WebhookTallies). Requests are
	// counted in memory, never written one by one: an anonymous sender's flood of forged
	// deliveries costs the database one statement per TallyEvery, from a timer of the handler's
	// own, and no request waits for it. Default TallyEveryDefault. See Handler.Close.
	TallyEvery time.Duration
	// Logger logs refused and failed deliveries. Default slog.Default().
	Logger *slog.Logger
}

// Handler is the http.Handler of a webhook endpoint. For each delivery it reads the exact body
// (up to MaxBodyBytes), verifies its signature, and then, in one transaction (one statement,
// sent in one round trip: outbox.Outbox.PutOnce), records its delivery ID for the tenant and
// source (an inbox) and puts it in the outbox for a dispatcher to hand on (typically an outbox.TemporalPublisher, so that the event reaches a workflow through
// Temporal's own deduplication). Only after that commit does it answer 2xx: a crash before it
// loses nothing (the provider retries), a crash after it loses nothing (the outbox delivers).
//
// Answers: 200 for a new delivery and for a duplicate (the provider must stop retrying; nothing
// is stored twice); 400 for a malformed or stale delivery, 401 for a missing or wrong
// signature, 404 for an unknown tenant, 405 for a method other than POST, 409 for a known
// delivery ID with another body (its Content: for Stripe, a body that differs only in delivery
// metadata is a duplicate), 413 for an oversized body; 500 while another handler's Topic holds
// the Source (ErrTopicConflict); 503 when the database did not take it, so that the provider
// retries. Nothing is stored, and nothing started, for any 4xx or 5xx.
//
// Each answer is counted in the metrics (MetricAccepted, …) and, for operators, in the schema's
// webhook_tallies table (operator.Client.WebhookTallies), per minute: the handler adds up its
// counts in memory and writes them in one statement at most every HandlerConfig.TallyEvery,
// from a timer that the first count after a write starts, never from a request. A refused
// request, which anyone can send, writes nothing. Call Close at shutdown to write the last
// counts.
type Handler struct {
	cfg   HandlerConfig
	db    *pgxpool.Pool
	out   *outbox.Outbox
	inbox *inbox.Inbox
	log   *slog.Logger
	met   client.MetricsHandler
	tally *tally
	// claimed is set once the database has recorded this handler's Topic for its Source (see
	// claimInDatabase); until then, every delivery checks it again.
	claimed atomic.Bool
}

var sourcePattern = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)

// NewHandler returns the handler of cfg.Source's webhooks, storing them in db and putting them in
// out (whose schema also holds the inbox that remembers delivery IDs). It refuses a Source that
// a handler built before, in this process on the same database and schema, puts under another
// Topic (see HandlerConfig.Topic).
func NewHandler(db *pgxpool.Pool, out *outbox.Outbox, cfg HandlerConfig) (*Handler, error) {
	switch {
	case db == nil || out == nil:
		return nil, errors.New("webhook.NewHandler: db and the outbox are required")
	case !sourcePattern.MatchString(cfg.Source):
		return nil, &ConfigError{Field: "HandlerConfig.Source", Problem: fmt.Sprintf("%q must be 1 to 64 lower-case letters, digits, '.', '_' or '-'", cfg.Source)}
	case cfg.Verifier == nil && cfg.VerifierFor == nil:
		return nil, &ConfigError{Field: "HandlerConfig.Verifier", Problem: "is required: webhook.Stripe, webhook.StandardWebhooks or webhook.GitHub with the endpoint's secrets"}
	case cfg.MaxBodyBytes < 0:
		return nil, &ConfigError{Field: "HandlerConfig.MaxBodyBytes", Problem: fmt.Sprintf("is %d; give a positive limit, or 0 for the default", cfg.MaxBodyBytes)}
	case cfg.Retention < 0:
		return nil, &ConfigError{Field: "HandlerConfig.Retention", Problem: fmt.Sprintf("is %v; give a positive duration, or 0 for the default", cfg.Retention)}
	case cfg.TallyEvery < 0:
		return nil, &ConfigError{Field: "HandlerConfig.TallyEvery", Problem: fmt.Sprintf("is %v; give a positive duration, or 0 for the default", cfg.TallyEvery)}
	}
	if err := validate(cfg.Verifier); err != nil {
		return nil, fmt.Errorf("webhook.NewHandler: %w", err)
	}
	cfg.Topic = cmp.Or(cfg.Topic, "webhook."+cfg.Source)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, min(MaxBodyBytesDefault, int64(out.MaxPayloadBytes())))
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.TallyEvery = cmp.Or(cfg.TallyEvery, TallyEveryDefault)
	if err := checkBodyLimit(cfg.MaxBodyBytes, out.MaxPayloadBytes()); err != nil {
		return nil, err
	}
	if cfg.Verifier != nil {
		if err := checkRetention(cfg.Verifier, cfg.Retention); err != nil {
			return nil, err
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	met := cmp.Or[client.MetricsHandler](cfg.Metrics, client.MetricsNopHandler).WithTags(map[string]string{telemetry.MetricTagSource: cfg.Source})
	ib, err := inbox.New(db, inbox.Config{
		Consumer: consumer(cfg.Source), Schema: out.Schema(), Retention: cfg.Retention, Metrics: client.MetricsNopHandler,
	})
	if err != nil {
		return nil, err
	}
	if err := claimInProcess(db, out.Schema(), cfg.Source, cfg.Topic); err != nil {
		return nil, err
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With("component", "tempotent.webhook", "source", cfg.Source)
	return &Handler{
		cfg: cfg, db: db, out: out, inbox: ib, met: met, log: log,
		tally: newTally(cfg.TallyEvery, log, tallyWriter(db, out.Schema(), cfg.Source)),
	}, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, http.StatusMethodNotAllowed, refusedMethod, "webhooks are POSTed")
		return
	}
	tenant, verifier, err := h.verifier(r)
	if err != nil {
		h.refuse(w, http.StatusNotFound, refusedTenant, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, http.StatusRequestEntityTooLarge, refusedOversized, fmt.Sprintf("body larger than %d bytes", h.cfg.MaxBodyBytes))
			return
		}
		h.refuse(w, http.StatusBadRequest, refusedUnreadable, "reading the body: "+err.Error())
		return
	}
	d, err := verifier.Verify(r.Header, body, h.cfg.Now())
	if err != nil {
		status, reason := http.StatusBadRequest, refusedMalformed
		switch {
		case errors.Is(err, ErrSignature), errors.Is(err, ErrNoSignature):
			status, reason = http.StatusUnauthorized, refusedSignature
		case errors.Is(err, ErrStale):
			reason = refusedStale
		}
		h.refuse(w, status, reason, err.Error())
		return
	}
	if !h.claimed.Load() {
		if err := claimInDatabase(r.Context(), h.db, h.out.Schema(), h.cfg.Source, h.cfg.Topic); err != nil {
			h.fail(w, d, tenant, err)
			return
		}
		h.claimed.Store(true)
	}
	accepted, err := h.store(r.Context(), tenant, d, body)
	switch {
	case errors.Is(err, inbox.ErrMismatch), errors.Is(err, outbox.ErrMismatch):
		// The outbox's check matters past Retention: the inbox has forgotten the ID, but the
		// outbox may still hold its message. A 503 there would have the provider retry forever.
		h.refuse(w, http.StatusConflict, refusedMismatch, fmt.Sprintf("delivery %s was received before with another body; nothing was stored", d.ID))
		return
	case err != nil:
		h.fail(w, d, tenant, err)
		return
	}
	if accepted {
		h.met.Counter(MetricAccepted).Inc(1)
		h.tally.add(kindAccepted)
	} else {
		h.met.Counter(MetricDuplicate).Inc(1)
		h.tally.add(kindDuplicate)
	}
	writeJSON(w, http.StatusOK, map[string]any{"received": true, "duplicate": !accepted})
}

// fail answers a delivery that was not stored: 500 for a topic conflict, which no retry mends
// until an operator does, and 503 otherwise. Either way the provider retries, and nothing is lost.
func (h *Handler) fail(w http.ResponseWriter, d Delivery, tenant string, err error) {
	if errors.Is(err, ErrTopicConflict) {
		h.count(MetricFailed, failedTopic)
		h.log.Error("delivery not stored: this handler's topic conflicts with another handler's; answering 500 so that the provider retries", "delivery", d.ID, "tenant", tenant, "topic", h.cfg.Topic, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "not stored: this endpoint is misconfigured; retry later"})
		return
	}
	// Tagged like the topic conflict's, so that the counter has one set of tag keys: tally's
	// Prometheus reporter refuses a name registered with two (its default handler panics).
	h.count(MetricFailed, failedStore)
	h.log.Error("delivery not stored; answering 503 so that the provider retries", "delivery", d.ID, "tenant", tenant, "err", err)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "not stored; retry"})
}

// verifier finds the request's tenant and its verifier.
func (h *Handler) verifier(r *http.Request) (tenant string, v Verifier, err error) {
	if h.cfg.Tenant != nil {
		if tenant, err = h.cfg.Tenant(r); err != nil {
			return "", nil, err
		}
	}
	if h.cfg.VerifierFor == nil {
		return tenant, h.cfg.Verifier, nil
	}
	if v, err = h.cfg.VerifierFor(tenant); err != nil {
		return "", nil, err
	}
	if v == nil {
		return "", nil, fmt.Errorf("no verifier for tenant %q", tenant)
	}
	if err := validate(v); err != nil {
		return "", nil, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	if err := checkRetention(v, h.cfg.Retention); err != nil {
		return "", nil, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	return tenant, v, nil
}

// validate calls v's Validate method, when it has one.
func validate(v Verifier) error {
	if c, ok := v.(interface{ Validate() error }); ok {
		return c.Validate()
	}
	return nil
}

// store records the delivery and puts its message, in one statement and one round trip
// (outbox.Outbox.PutOnce), and reports whether it was new.
//
// The inbox record holds the digest of the delivery's Content (its body when Content is nil),
// so that a redelivery differing only in delivery metadata is a duplicate. Records written
// before Content existed hold the whole body's digest: a delivery with a Content is compared
// with its whole body too, so that a redelivery of such a record, byte for byte, stays a
// duplicate after an upgrade instead of becoming a conflict.
func (h *Handler) store(ctx context.Context, tenant string, d Delivery, body []byte) (accepted bool, err error) {
	id := MessageID(h.cfg.Source, tenant, d.ID)
	content := d.Content
	if content == nil {
		content = body
	}
	digest := sha256.Sum256(content)
	once, err := h.out.PutOnce(ctx, h.db, outbox.InboxRecord{Consumer: consumer(h.cfg.Source), Digest: digest[:], LockTimeout: inbox.LockTimeoutDefault}, outbox.Message{
		ID:      id,
		Topic:   h.cfg.Topic,
		Payload: body,
		Headers: map[string]string{HeaderSource: h.cfg.Source, HeaderTenant: tenant, HeaderID: d.ID, HeaderEventType: d.Type},
	})
	switch {
	case err != nil:
		return false, err
	case once.Recorded:
		return true, nil
	case once.Stored == nil || bytes.Equal(once.Stored, digest[:]):
		return false, nil
	}
	if d.Content != nil {
		if whole := sha256.Sum256(body); bytes.Equal(once.Stored, whole[:]) {
			return false, nil
		}
	}
	return false, fmt.Errorf("%w: %s was received before with another body; nothing was stored", inbox.ErrMismatch, id)
}

// consumer is the inbox consumer whose records remember source's delivery IDs.
func consumer(source string) string { return "webhook/" + source }

// Purge forgets up to limit delivery IDs older than HandlerConfig.Retention (limit <= 0 means
// inbox.PurgeBatchDefault) and returns how many: call it periodically, unless a worker started
// with package worker does (it purges the delivery IDs of every source after
// worker.Config.InboxRetention). A delivery replayed after its ID is forgotten is stored, and
// handed on, again.
func (h *Handler) Purge(ctx context.Context, limit int) (int64, error) {
	return h.inbox.Purge(ctx, limit)
}

// MessageID is the outbox message ID of the delivery id of tenant from source: what a publisher
// passes on (an update ID, an Idempotency-Key) and consumers deduplicate on.
func MessageID(source, tenant, id string) string {
	return "webhook/" + source + "/" + strconv.Quote(tenant) + "/" + id
}

// refuse answers a delivery refused for reason (one of the refused kinds), counting it.
func (h *Handler) refuse(w http.ResponseWriter, status int, reason kind, msg string) {
	h.count(MetricRefused, reason)
	h.log.Warn("delivery refused", "status", status, "reason", kindNames[reason].reason, "err", msg)
	writeJSON(w, status, map[string]any{"error": msg})
}

// count counts a refused or failed delivery of kind k in metric, tagged with its reason, and in
// the tallies.
func (h *Handler) count(metric string, k kind) {
	h.met.WithTags(map[string]string{telemetry.MetricTagReason: kindNames[k].reason}).Counter(metric).Inc(1)
	h.tally.add(k)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
