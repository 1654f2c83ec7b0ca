package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/outbox"
)

// The signal, signal-with-start and update-with-start targets on the dev server: each delivered
// again and again reaches its workflow once, a with-start target starts the workflow it names,
// and the message's tenant reaches the workflow's keys.

const tenantQueue = "outbox-temporal-tenant"

// handled is what inboxWorkflow did with one event.
type handled struct {
	Times         int    // how many times the workflow handled it: 1 whatever the deliveries
	Payload       string // the signal's or update's payload
	SignalTenant  string // the Signal's Tenant (signals only)
	HandlerTenant string // keys.TenantFromWorkflow where it was handled
	KeyTenant     string // the tenant of the key of the activity it scheduled
	Done          bool   // the activity has returned
}

// inboxState is what inboxWorkflow has seen (query "state").
type inboxState struct {
	Tenant string             // keys.TenantFromWorkflow of the workflow
	Arg    string             // what it was started with
	Events map[string]handled // by message ID
}

// inboxWorkflow handles "event" signals (outbox.Signal[string], deduplicated by ReceiveSignal)
// and "event" updates (deduplicated by Temporal's update ID) alike: it records the event and runs
// an activity whose key's tenant it records, until a "finish" signal.
func inboxWorkflow(ctx workflow.Context, arg string) (inboxState, error) {
	s := inboxState{Tenant: keys.TenantFromWorkflow(ctx), Arg: arg, Events: map[string]handled{}}
	handle := func(ctx workflow.Context, id, payload, signalTenant string) error {
		h := s.Events[id]
		h.Times++
		h.Payload, h.SignalTenant, h.HandlerTenant = payload, signalTenant, keys.TenantFromWorkflow(ctx)
		s.Events[id] = h
		actx := workflow.WithActivityOptions(keys.WithStep(ctx, "record-"+id), workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
		})
		var tenant string
		err := workflow.ExecuteActivity(actx, "KeyTenant").Get(ctx, &tenant)
		h.KeyTenant, h.Done = tenant, true
		s.Events[id] = h
		return err
	}
	if err := workflow.SetQueryHandler(ctx, "state", func() (inboxState, error) { return s, nil }); err != nil {
		return s, err
	}
	if err := workflow.SetUpdateHandler(ctx, "event", func(ctx workflow.Context, payload string) error {
		return handle(ctx, workflow.GetCurrentUpdateInfo(ctx).ID, payload, "")
	}); err != nil {
		return s, err
	}
	var seen outbox.SignalDedup
	events := workflow.GetSignalChannel(ctx, "event")
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sig := outbox.ReceiveSignal[string](ctx, events, &seen)
			if err := handle(ctx, sig.ID, sig.Payload, sig.Tenant); err != nil {
				workflow.GetLogger(ctx).Error("event", "error", err)
			}
		}
	})
	workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return s, err
}

// keyTenant returns the tenant of the running activity's key.
func keyTenant(ctx context.Context) (string, error) {
	k, err := keys.FromActivity(ctx)
	return k.Tenant, err
}

// tenantClient returns a client of the dev server behind c with keys.TenantPropagator, and runs a
// worker of inboxWorkflow on it (propagator and keys interceptor installed), stopped when t ends.
func tenantClient(t *testing.T, c client.Client) client.Client {
	t.Helper()
	tc, err := client.NewClientFromExisting(c, client.Options{
		Logger:             tlog.NewStructuredLogger(quiet),
		ContextPropagators: []workflow.ContextPropagator{keys.TenantPropagator()},
	})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	w := worker.New(tc, tenantQueue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()}})
	w.RegisterWorkflowWithOptions(inboxWorkflow, workflow.RegisterOptions{Name: "Inbox"})
	w.RegisterActivityWithOptions(keyTenant, activity.RegisterOptions{Name: "KeyTenant"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return tc
}

// stateOf queries inboxWorkflow id.
func stateOf(t *testing.T, c client.Client, id string) inboxState {
	t.Helper()
	v, err := c.QueryWorkflow(context.Background(), id, "", "state")
	require.NoError(t, err)
	var s inboxState
	require.NoError(t, v.Get(&s))
	return s
}

// awaitEvent waits until inboxWorkflow id has handled message messageID (its activity done), and
// returns its state. Signals are handled in the order they arrive, one at a time: once a later
// message is handled, every repeat sent before it has been seen too.
func awaitEvent(t *testing.T, c client.Client, id, messageID string) inboxState {
	t.Helper()
	var s inboxState
	require.Eventually(t, func() bool {
		s = stateOf(t, c, id)
		return s.Events[messageID].Done
	}, 30*time.Second, 10*time.Millisecond, "workflow %s never handled %s", id, messageID)
	return s
}

// signalsIn counts the signals named name in the history of workflow id's latest run: what
// reached the workflow, before its deduplication.
func signalsIn(t *testing.T, c client.Client, id, name string) int {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == name {
			n++
		}
	}
	return n
}

func tenantDelivery(messageID, payload, tenant string, attempt int) outbox.Delivery {
	m := outbox.Message{ID: messageID, Topic: "events", Payload: []byte(payload)}
	if tenant != "" {
		m.Headers = map[string]string{outbox.HeaderTenant: tenant}
	}
	return outbox.Delivery{Message: m, Attempt: attempt}
}

func permanent(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.True(t, outbox.IsPermanent(err), "not permanent: %v", err)
}
