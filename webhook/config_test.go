package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// Settings that cannot work are refused when the handler is built, with a *ConfigError naming the
// field and saying what to do, instead of failing every delivery later: a body limit above the
// outbox's payload limit (each body between the two would be answered 503 for ever), and a
// retention shorter than twice the signature tolerance (a replay within the tolerance after the
// ID was forgotten would be taken twice).
func TestNewHandlerRefusesSettingsThatCannotWork(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	small, err := outbox.New(pool, &outbox.Config{MaxPayloadBytes: 1000})
	require.NoError(t, err)
	stripe := webhook.Stripe{Secrets: []string{stripeSecret}}
	sw := webhook.StandardWebhooks{Secrets: []string{swSecret}}
	gh := webhook.GitHub{Secrets: []string{ghSecret}}
	hour := webhook.Stripe{Secrets: []string{stripeSecret}, Tolerance: time.Hour}

	tests := []struct {
		name  string
		cfg   webhook.HandlerConfig
		field string // "" when the handler is built
		says  string // what the error tells to do, where the case checks it
	}{
		{name: "BodyLimitAboveOutbox", cfg: webhook.HandlerConfig{Verifier: stripe, MaxBodyBytes: 1001}, field: "HandlerConfig.MaxBodyBytes"},
		{name: "BodyLimitAtOutbox", cfg: webhook.HandlerConfig{Verifier: stripe, MaxBodyBytes: 1000}},
		{name: "BodyLimitDefaultAboveOutbox", cfg: webhook.HandlerConfig{Verifier: stripe}}, // capped, see below

		{name: "StripeRetentionUnderTwiceDefaultTolerance", cfg: webhook.HandlerConfig{Verifier: stripe, Retention: 2*webhook.ToleranceDefault - time.Second}, field: "HandlerConfig.Retention"},
		{name: "StripeRetentionAtTwiceDefaultTolerance", cfg: webhook.HandlerConfig{Verifier: stripe, Retention: 2 * webhook.ToleranceDefault}},
		{name: "StripeRetentionUnderTwiceTolerance", cfg: webhook.HandlerConfig{Verifier: hour, Retention: 2*time.Hour - time.Second}, field: "HandlerConfig.Retention",
			says: "set Retention to at least 2h0m0s"},
		{name: "StripePointerRetentionUnderTwiceTolerance", cfg: webhook.HandlerConfig{Verifier: &hour, Retention: time.Hour}, field: "HandlerConfig.Retention"},
		{name: "StripeDefaultRetentionUnderTwiceTolerance", cfg: webhook.HandlerConfig{Verifier: webhook.Stripe{Secrets: []string{stripeSecret}, Tolerance: 16 * 24 * time.Hour}}, field: "HandlerConfig.Retention"},
		{name: "StandardWebhooksRetentionUnderTwiceTolerance", cfg: webhook.HandlerConfig{Verifier: sw, Retention: 2*webhook.ToleranceDefault - time.Second}, field: "HandlerConfig.Retention"},
		{name: "StandardWebhooksPointerRetentionUnderTwiceTolerance", cfg: webhook.HandlerConfig{Verifier: &sw, Retention: time.Minute}, field: "HandlerConfig.Retention"},
		{name: "StandardWebhooksRetentionAtTwiceTolerance", cfg: webhook.HandlerConfig{Verifier: sw, Retention: 2 * webhook.ToleranceDefault}},
		// GitHub signs no timestamp: no retention covers a replay, and none is refused.
		{name: "GitHubAnyRetention", cfg: webhook.HandlerConfig{Verifier: gh, Retention: time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Source = "s-" + strings.ToLower(tc.name)
			h, err := webhook.NewHandler(pool, small, tc.cfg)
			if tc.field == "" {
				require.NoError(t, err)
				require.NotNil(t, h)
				return
			}
			var ce *webhook.ConfigError
			require.True(t, errors.As(err, &ce), "%v is not a *webhook.ConfigError", err)
			require.Equal(t, tc.field, ce.Field)
			require.Contains(t, err.Error(), "webhook."+tc.field+" is ")
			require.Contains(t, err.Error(), tc.says, "the error does not say what to set")
			require.Nil(t, h)
		})
	}
}

// A MaxBodyBytes left zero is the default capped by the outbox's payload limit: a body above that
// limit is answered 413, which the provider does not retry for ever, not 503.
func TestHandlerBodyLimitDefaultsToTheOutboxLimit(t *testing.T) {
	t.Parallel()
	k := newHook(t, webhook.HandlerConfig{})
	out, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: k.schema, MaxPayloadBytes: 200})
	require.NoError(t, err)
	h, err := webhook.NewHandler(pgtest.Pool(t), out, webhook.HandlerConfig{
		Source: "capped", Verifier: webhook.Stripe{Secrets: []string{stripeSecret}}, Now: func() time.Time { return now }, Logger: quiet,
	})
	require.NoError(t, err)
	capped := hook{Handler: h, schema: k.schema}

	fits := event("evt_1", 1)
	fits = append(fits[:len(fits)-2], []byte(`,"pad":"`+strings.Repeat("x", 200-len(fits)-8)+`"}`)...)
	require.Len(t, fits, 200)
	requireOK(t, capped.post("/", stripeHeader(webhook.SignStripe(stripeSecret, now, fits)), fits), false)

	over := append(fits[:len(fits)-2:len(fits)-2], []byte(`x"}`)...)
	require.Len(t, over, 201)
	requireStatus(t, capped.post("/", stripeHeader(webhook.SignStripe(stripeSecret, now, over)), over), http.StatusRequestEntityTooLarge)
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t))
}

// VerifierFor's verifiers are only known per request: one whose tolerance the retention does not
// cover is refused like an invalid one (404), nothing stored.
func TestHandlerRefusesTenantVerifierWithLongTolerance(t *testing.T) {
	t.Parallel()
	k := newHook(t, webhook.HandlerConfig{
		Retention: time.Hour,
		VerifierFor: func(string) (webhook.Verifier, error) {
			return webhook.Stripe{Secrets: []string{stripeSecret}, Tolerance: time.Hour}, nil
		},
	})
	body := event("evt_1", 1)
	w := k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, now, body)), body)
	requireStatus(t, w, http.StatusNotFound)
	require.Contains(t, decode(t, w).Error, "Retention")
	require.Equal(t, rows{}, k.rows(t))
}
