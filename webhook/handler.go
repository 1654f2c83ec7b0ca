package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
	HeaderSource    = "Webhook-Source"
	HeaderTenant    = "Webhook-Tenant"
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
	MetricFailed    = telemetry.WebhookFailed    // a 5xx: the database did not take it; the provider retries
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
	// duplicate, and its topic would never get it. NewHandler refuses such a handler when the
	// first was built in the same process on the same database and schema; across processes,
	// give each endpoint a Source of its own ("stripe-billing", "stripe-shipping").
	Topic string
	// MaxBodyBytes bounds a body; a larger one is answered 413. Default MaxBodyBytesDefault.
	MaxBodyBytes int64
	// Retention is how long delivery IDs are remembered; see RetentionDefault.
	Retention time.Duration
	// Now is the clock that signature timestamps are checked against. Default time.Now.
	Now func() time.Time
	// Metrics receives the Metric counters. Default: none.
	Metrics client.MetricsHandler
	// Logger logs refused and failed deliveries. Default slog.Default().
	Logger *slog.Logger
}

// Handler is the http.Handler of a webhook endpoint. For each delivery it reads the exact body
// (up to MaxBodyBytes), verifies its signature, and then, in one transaction, records its
// delivery ID for the tenant and source (an inbox) and puts it in the outbox for a dispatcher to
// hand on (typically an outbox.TemporalPublisher, so that the event reaches a workflow through
// Temporal's own deduplication). Only after that commit does it answer 2xx: a crash before it
// loses nothing (the provider retries), a crash after it loses nothing (the outbox delivers).
//
// Answers: 200 for a new delivery and for a duplicate (the provider must stop retrying; nothing
// is stored twice); 400 for a malformed or stale delivery, 401 for a missing or wrong
// signature, 404 for an unknown tenant, 405 for a method other than POST, 409 for a known
// delivery ID with another body, 413 for an oversized body; 503 when the database did not take
// it, so that the provider retries. Nothing is stored, and nothing started, for any 4xx.
type Handler struct {
	cfg   HandlerConfig
	db    *pgxpool.Pool
	out   *outbox.Outbox
	inbox *inbox.Inbox
	log   *slog.Logger
	met   client.MetricsHandler
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
		return nil, fmt.Errorf("webhook.NewHandler: Source %q must be 1 to 64 lower-case letters, digits, '.', '_' or '-'", cfg.Source)
	case cfg.Verifier == nil && cfg.VerifierFor == nil:
		return nil, errors.New("webhook.NewHandler: Verifier is required: webhook.Stripe or webhook.StandardWebhooks with the endpoint's secrets")
	case cfg.MaxBodyBytes < 0 || cfg.Retention < 0:
		return nil, errors.New("webhook.NewHandler: MaxBodyBytes and Retention must be positive, or 0 for the default")
	}
	if err := validate(cfg.Verifier); err != nil {
		return nil, fmt.Errorf("webhook.NewHandler: %w", err)
	}
	cfg.Topic = cmp.Or(cfg.Topic, "webhook."+cfg.Source)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	met := cmp.Or[client.MetricsHandler](cfg.Metrics, client.MetricsNopHandler).WithTags(map[string]string{telemetry.MetricTagSource: cfg.Source})
	ib, err := inbox.New(db, inbox.Config{
		Consumer: "webhook/" + cfg.Source, Schema: out.Schema(), Retention: cfg.Retention, Metrics: client.MetricsNopHandler,
	})
	if err != nil {
		return nil, err
	}
	if err := claimEndpoint(db, out.Schema(), cfg.Source, cfg.Topic); err != nil {
		return nil, err
	}
	return &Handler{
		cfg: cfg, db: db, out: out, inbox: ib, met: met,
		log: cmp.Or(cfg.Logger, slog.Default()).With("component", "tempotent.webhook", "source", cfg.Source),
	}, nil
}

// endpoints holds the topic of every Source a handler was built for in this process, per
// database and schema, for claimEndpoint.
var endpoints = struct {
	sync.Mutex
	topics map[endpointKey]string
}{topics: map[endpointKey]string{}}

// endpointKey names where a handler remembers its deliveries: the database (by address, not by
// pool, so that two pools on one database are one), the schema, and the source.
type endpointKey struct {
	host     string
	port     uint16
	database string
	schema   string
	source   string
}

// claimEndpoint records that source's deliveries in schema go to topic, and refuses a source
// already recorded with another topic. The inbox's consumer is "webhook/" + source, and the
// outbox message ID MessageID(source, tenant, id): keying them on the topic too would let
// deliveries already remembered under the old keys through again after an upgrade, under new
// message IDs that consumers would not deduplicate; so the handler refuses instead.
func claimEndpoint(db *pgxpool.Pool, schema, source, topic string) error {
	c := db.Config().ConnConfig
	key := endpointKey{host: c.Host, port: c.Port, database: c.Database, schema: schema, source: source}
	endpoints.Lock()
	defer endpoints.Unlock()
	if other, ok := endpoints.topics[key]; ok && other != topic {
		return fmt.Errorf("webhook.NewHandler: Source %q already has a handler putting its deliveries under topic %q; deliveries are remembered per source, so every delivery one handler takes would be a duplicate to the other, and topic %q would never get it: give each endpoint a Source of its own, such as %q and %q",
			source, other, topic, source+"-billing", source+"-shipping")
	}
	endpoints.topics[key] = topic
	return nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, http.StatusMethodNotAllowed, "method", "webhooks are POSTed")
		return
	}
	tenant, verifier, err := h.verifier(r)
	if err != nil {
		h.refuse(w, http.StatusNotFound, "tenant", err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, http.StatusRequestEntityTooLarge, "oversized", fmt.Sprintf("body larger than %d bytes", h.cfg.MaxBodyBytes))
			return
		}
		h.refuse(w, http.StatusBadRequest, "unreadable", "reading the body: "+err.Error())
		return
	}
	d, err := verifier.Verify(r.Header, body, h.cfg.Now())
	if err != nil {
		status, reason := http.StatusBadRequest, "malformed"
		switch {
		case errors.Is(err, ErrSignature), errors.Is(err, ErrNoSignature):
			status, reason = http.StatusUnauthorized, "signature"
		case errors.Is(err, ErrStale):
			reason = "stale"
		}
		h.refuse(w, status, reason, err.Error())
		return
	}
	accepted, err := h.store(r.Context(), tenant, d, body)
	switch {
	case errors.Is(err, inbox.ErrMismatch), errors.Is(err, outbox.ErrMismatch):
		// The outbox's check matters past Retention: the inbox has forgotten the ID, but the
		// outbox may still hold its message. A 503 there would have the provider retry forever.
		h.refuse(w, http.StatusConflict, "mismatch", fmt.Sprintf("delivery %s was received before with another body; nothing was stored", d.ID))
		return
	case err != nil:
		h.met.Counter(MetricFailed).Inc(1)
		h.log.Error("delivery not stored; answering 503 so that the provider retries", "delivery", d.ID, "tenant", tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "not stored; retry"})
		return
	}
	if accepted {
		h.met.Counter(MetricAccepted).Inc(1)
	} else {
		h.met.Counter(MetricDuplicate).Inc(1)
	}
	writeJSON(w, http.StatusOK, map[string]any{"received": true, "duplicate": !accepted})
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
	return tenant, v, nil
}

// validate calls v's Validate method, when it has one.
func validate(v Verifier) error {
	if c, ok := v.(interface{ Validate() error }); ok {
		return c.Validate()
	}
	return nil
}

// store records the delivery and puts its message in one transaction, and reports whether it
// was new.
func (h *Handler) store(ctx context.Context, tenant string, d Delivery, body []byte) (accepted bool, err error) {
	err = pgx.BeginFunc(ctx, h.db, func(tx pgx.Tx) error {
		first, err := h.inbox.Claim(ctx, tx, inbox.Message{ID: MessageID(h.cfg.Source, tenant, d.ID), Payload: body})
		if err != nil || !first {
			return err
		}
		accepted = true
		return h.out.Put(ctx, tx, outbox.Message{
			ID:      MessageID(h.cfg.Source, tenant, d.ID),
			Topic:   h.cfg.Topic,
			Payload: body,
			Headers: map[string]string{HeaderSource: h.cfg.Source, HeaderTenant: tenant, HeaderID: d.ID, HeaderEventType: d.Type},
		})
	})
	return accepted, err
}

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

func (h *Handler) refuse(w http.ResponseWriter, status int, reason, msg string) {
	h.met.WithTags(map[string]string{telemetry.MetricTagReason: reason}).Counter(MetricRefused).Inc(1)
	h.log.Warn("delivery refused", "status", status, "reason", reason, "err", msg)
	writeJSON(w, status, map[string]any{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
