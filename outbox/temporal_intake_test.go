package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// testIntakeTenant: a webhook for tenant acme, POSTed three times, starts the workflow it names
// by signal-with-start through a dispatcher that also redelivers it; the workflow handles it once
// and runs under acme, in its own code and in its activity's key.
func testIntakeTenant(t *testing.T, tc client.Client) {
	ctx := context.Background()
	require.Equal(t, outbox.HeaderTenant, webhook.HeaderTenant, "the intake writes the header the publisher reads")
	o, name := setup(t, nil)
	const secret = "whsec_tenant_0123456789"
	h, err := webhook.NewHandler(pgtest.Pool(t), o, webhook.HandlerConfig{
		Source: "stripe-tenant", Verifier: webhook.Stripe{Secrets: []string{secret}}, Logger: quiet,
		Tenant: func(r *http.Request) (string, error) { return strings.TrimPrefix(r.URL.Path, "/"), nil },
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	const workflowID = "intake-order-7"
	route := func(d outbox.Delivery) (outbox.TemporalTarget, error) {
		return outbox.SignalWithStartWorkflow{
			Options:  client.StartWorkflowOptions{ID: workflowID, TaskQueue: tenantQueue},
			Workflow: "Inbox", Args: []any{"started by the webhook"},
			SignalName: "event", Payload: d.Headers[webhook.HeaderID],
		}, nil
	}
	d := newDispatcher(t, o, &outbox.TemporalPublisher{Client: tc, Route: route}, outbox.DispatcherConfig{})

	body := []byte(`{"id":"evt_tenant","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_7"}}}`)
	for range 3 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/"+tenant, strings.NewReader(string(body)))
		require.NoError(t, err)
		req.Header.Set("Stripe-Signature", webhook.SignStripe(secret, time.Now(), body))
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	messageID := webhook.MessageID("stripe-tenant", tenant, "evt_tenant")
	drain(t, ctx, d, o)
	redeliver(t, name, messageID)
	drain(t, ctx, d, o)
	require.Equal(t, row{State: "delivered", Attempts: 2}, rowOf(t, name, messageID))

	s := awaitEvent(t, tc, workflowID, messageID)
	require.Equal(t, inboxState{Tenant: tenant, Arg: "started by the webhook", Events: map[string]handled{messageID: {
		Times: 1, Payload: "evt_tenant", SignalTenant: tenant, HandlerTenant: tenant, KeyTenant: tenant, Done: true,
	}}}, s)
	require.Equal(t, 2, signalsIn(t, tc, workflowID, "event"), "the redelivery reached the workflow")
	var result inboxState
	finish(t, tc, workflowID, &result)
}
