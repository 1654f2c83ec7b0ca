package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/outbox"
)

const tenant = "acme"

// path is one way a message reaches inboxWorkflow id.
type path struct {
	name   string
	target func(id string, d outbox.Delivery, v variant) outbox.TemporalTarget
	starts bool // the target starts the workflow
	signal bool // the target signals (the workflow deduplicates) rather than updates (Temporal does)
}

// variant is what a test changes in a path's target.
type variant struct {
	skipClosed bool
	reuse      enumspb.WorkflowIdReusePolicy // of a with-start target
}

func startOptions(id string, v variant) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: tenantQueue, WorkflowIDReusePolicy: v.reuse}
}

var paths = []path{
	{name: "SignalWorkflow", signal: true, target: func(id string, d outbox.Delivery, v variant) outbox.TemporalTarget {
		return outbox.SignalWorkflow{WorkflowID: id, SignalName: "event", Payload: string(d.Payload), SkipClosed: v.skipClosed}
	}},
	{name: "SignalWithStartWorkflow", signal: true, starts: true, target: func(id string, d outbox.Delivery, v variant) outbox.TemporalTarget {
		return outbox.SignalWithStartWorkflow{
			Options: startOptions(id, v), Workflow: "Inbox", Args: []any{"started by " + d.ID},
			SignalName: "event", Payload: string(d.Payload), SkipClosed: v.skipClosed,
		}
	}},
	{name: "UpdateWorkflow", target: func(id string, d outbox.Delivery, v variant) outbox.TemporalTarget {
		return outbox.UpdateWorkflow{WorkflowID: id, UpdateName: "event", Args: []any{string(d.Payload)}, SkipClosed: v.skipClosed}
	}},
	{name: "UpdateWithStartWorkflow", starts: true, target: func(id string, d outbox.Delivery, v variant) outbox.TemporalTarget {
		return outbox.UpdateWithStartWorkflow{
			Options: startOptions(id, v), Workflow: "Inbox", WorkflowArgs: []any{"started by " + d.ID},
			UpdateName: "event", Args: []any{string(d.Payload)}, SkipClosed: v.skipClosed,
		}
	}},
}

func publisher(c client.Client, p path, id string, v variant) *outbox.TemporalPublisher {
	return &outbox.TemporalPublisher{Client: c, Route: func(d outbox.Delivery) (outbox.TemporalTarget, error) { return p.target(id, d, v), nil }}
}

// testTargets runs on the dev server behind c.
func testTargets(t *testing.T, c client.Client) {
	tc := tenantClient(t, c)

	// Each path, published three times in a row and through a dispatcher that redelivers: the
	// workflow handles each message once, under the intake's tenant, in its own code and in its
	// activity's key. A with-start path starts the workflow with the first message.
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			id := "tenant-" + p.name
			// A signal cannot change a running workflow's tenant: its keys keep the tenant the
			// workflow was started with, and the Signal says whose event it is. An update's
			// header gives its handler the message's tenant: the workflow is started without one
			// to show it.
			wantTenant := tenant
			if !p.starts {
				startCtx := ctx
				if p.signal {
					startCtx = keys.WithTenant(ctx, tenant)
				} else {
					wantTenant = ""
				}
				_, err := tc.ExecuteWorkflow(startCtx, client.StartWorkflowOptions{ID: id, TaskQueue: tenantQueue}, "Inbox", "started by the test")
				require.NoError(t, err)
			}
			pub := publisher(tc, p, id, variant{})
			for attempt := 1; attempt <= 3; attempt++ {
				require.NoError(t, pub.Publish(ctx, tenantDelivery("m1", "paid", tenant, attempt)))
			}

			o, name := setup(t, nil)
			put(t, ctx, o, outbox.Message{ID: "m2", Topic: "events", Payload: []byte("shipped"), Headers: map[string]string{outbox.HeaderTenant: tenant}})
			d := newDispatcher(t, o, pub, outbox.DispatcherConfig{})
			drain(t, ctx, d, o)
			redeliver(t, name, "m2")
			drain(t, ctx, d, o)
			require.Equal(t, row{State: "delivered", Attempts: 2}, rowOf(t, name, "m2"))

			// Signals are handled in order: once m3 is, the repeats of m1 and m2 have been seen.
			require.NoError(t, pub.Publish(ctx, tenantDelivery("m3", "barrier", tenant, 1)))
			s := awaitEvent(t, tc, id, "m3")
			require.Equal(t, wantTenant, s.Tenant, "the workflow's tenant")
			if p.starts {
				require.Equal(t, "started by m1", s.Arg)
				require.Eventually(t, func() bool { return executions(t, c, id) == 1 }, 30*time.Second, 20*time.Millisecond)
			}
			want := handled{Times: 1, KeyTenant: tenant, HandlerTenant: tenant, Done: true}
			if p.signal {
				want.SignalTenant = tenant
				require.Equal(t, 3+2+1, signalsIn(t, tc, id, "event"), "every delivery reached the workflow")
			}
			for messageID, payload := range map[string]string{"m1": "paid", "m2": "shipped", "m3": "barrier"} {
				want.Payload = payload
				require.Equal(t, want, s.Events[messageID], messageID)
			}
			var result inboxState
			finish(t, tc, id, &result)
			require.Len(t, result.Events, 3)
		})
	}

	t.Run("StartWorkflow", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pub := &outbox.TemporalPublisher{Client: tc, Route: func(d outbox.Delivery) (outbox.TemporalTarget, error) {
			return outbox.StartWorkflow{Options: client.StartWorkflowOptions{TaskQueue: tenantQueue}, Workflow: "Inbox", Args: []any{string(d.Payload)}}, nil
		}}
		for attempt := 1; attempt <= 2; attempt++ {
			require.NoError(t, pub.Publish(ctx, tenantDelivery("s1", "placed", tenant, attempt)))
		}
		const id = "events/s1"
		require.Equal(t, inboxState{Tenant: tenant, Arg: "placed", Events: map[string]handled{}}, stateOf(t, tc, id))
		var result inboxState
		finish(t, tc, id, &result)
	})

	t.Run("IntakeTenant", func(t *testing.T) {
		t.Parallel()
		testIntakeTenant(t, tc)
	})

	t.Run("Explore", func(t *testing.T) {
		t.Parallel()
		exploreTargets(t, tc)
	})

	t.Run("Closed", func(t *testing.T) {
		t.Parallel()
		testClosed(t, tc)
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		testRefused(t, c, tc)
	})
}

// testClosed: what each path does with a workflow that has closed.
func testClosed(t *testing.T, tc client.Client) {
	ctx := context.Background()
	closed := func(t *testing.T, p path, id string) *outbox.TemporalPublisher {
		t.Helper()
		pub := publisher(tc, p, id, variant{})
		if !p.starts {
			_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tenantQueue}, "Inbox", "started by the test")
			require.NoError(t, err)
		}
		require.NoError(t, pub.Publish(ctx, tenantDelivery("c1", "paid", "", 1)))
		awaitEvent(t, tc, id, "c1")
		var result inboxState
		finish(t, tc, id, &result)
		return pub
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			id := "closed-" + p.name
			pub := closed(t, p, id)
			first := runID(t, tc, id)

			// A repeat of the message the closed run handled: an update's outcome is looked up
			// (delivered); a signal's cannot be (permanent).
			err := pub.Publish(ctx, tenantDelivery("c1", "paid", "", 2))
			if p.signal {
				permanent(t, err)
			} else {
				require.NoError(t, err)
			}
			// A new message: permanent, or delivered (and dropped) with SkipClosed.
			permanent(t, pub.Publish(ctx, tenantDelivery("c2", "late", "", 1)))
			require.NoError(t, publisher(tc, p, id, variant{skipClosed: true}).Publish(ctx, tenantDelivery("c2", "late", "", 1)))
			require.Equal(t, first, runID(t, tc, id), "a delivery to a closed workflow started another run")
		})
	}

	// With AllowDuplicate a with-start path starts a new run for a new message. A repeat of a
	// message the closed run handled gets the closed run's outcome if it is an update, and
	// starts a new run that handles it again if it is a signal (documented).
	for _, p := range paths {
		if !p.starts {
			continue
		}
		t.Run(p.name+"AllowDuplicate", func(t *testing.T) {
			t.Parallel()
			id := "closed-allow-" + p.name
			closed(t, p, id)
			first := runID(t, tc, id)
			pub := publisher(tc, p, id, variant{reuse: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE})
			require.NoError(t, pub.Publish(ctx, tenantDelivery("c1", "paid", "", 2)))
			if !p.signal {
				require.Equal(t, first, runID(t, tc, id), "the repeat of a completed update started a run")
			}
			require.NoError(t, pub.Publish(ctx, tenantDelivery("c2", "late", "", 1)))
			s := awaitEvent(t, tc, id, "c2")
			require.NotEqual(t, first, runID(t, tc, id))
			if p.signal {
				require.Equal(t, "started by c1", s.Arg)
				require.Equal(t, 1, s.Events["c1"].Times)
			} else {
				require.Equal(t, "started by c2", s.Arg)
				require.NotContains(t, s.Events, "c1")
			}
			var result inboxState
			finish(t, tc, id, &result)
		})
	}
}

// testRefused: what the publisher refuses, permanently, before anything reaches Temporal.
func testRefused(t *testing.T, c, tc client.Client) {
	ctx := context.Background()
	notStarted := func(t *testing.T, id string) {
		t.Helper()
		_, err := tc.DescribeWorkflow(ctx, id, "")
		var notFound *serviceerror.NotFound
		require.ErrorAs(t, err, &notFound, "workflow %s exists", id)
	}

	t.Run("Target", func(t *testing.T) {
		opts := client.StartWorkflowOptions{ID: "refused", TaskQueue: tenantQueue}
		failing := opts
		failing.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
		for _, tt := range []struct {
			target outbox.TemporalTarget
			field  string
		}{
			{outbox.SignalWorkflow{SignalName: "event"}, "WorkflowID"},
			{outbox.SignalWorkflow{WorkflowID: "refused"}, "SignalName"},
			{outbox.SignalWithStartWorkflow{Workflow: "Inbox", SignalName: "event"}, "Options.ID"},
			{outbox.SignalWithStartWorkflow{Options: opts, SignalName: "event"}, "Workflow"},
			{outbox.SignalWithStartWorkflow{Options: opts, Workflow: "Inbox"}, "SignalName"},
			{outbox.SignalWithStartWorkflow{Options: failing, Workflow: "Inbox", SignalName: "event"}, "Options.WorkflowIDConflictPolicy"},
			{outbox.UpdateWorkflow{UpdateName: "event"}, "WorkflowID"},
			{outbox.UpdateWorkflow{WorkflowID: "refused"}, "UpdateName"},
			{outbox.UpdateWithStartWorkflow{Workflow: "Inbox", UpdateName: "event"}, "Options.ID"},
			{outbox.UpdateWithStartWorkflow{Options: opts, UpdateName: "event"}, "Workflow"},
			{outbox.UpdateWithStartWorkflow{Options: opts, Workflow: "Inbox"}, "UpdateName"},
			{outbox.UpdateWithStartWorkflow{Options: failing, Workflow: "Inbox", UpdateName: "event"}, "Options.WorkflowIDConflictPolicy"},
			{outbox.StartWorkflow{Options: opts}, "Workflow"},
			{outbox.StartWorkflow{Workflow: "Inbox"}, "Options.TaskQueue"},
			{outbox.SignalWithStartWorkflow{Options: client.StartWorkflowOptions{ID: "refused"}, Workflow: "Inbox", SignalName: "event"}, "Options.TaskQueue"},
			{outbox.UpdateWithStartWorkflow{Options: client.StartWorkflowOptions{ID: "refused"}, Workflow: "Inbox", UpdateName: "event"}, "Options.TaskQueue"},
		} {
			pub := &outbox.TemporalPublisher{Client: tc, Route: func(outbox.Delivery) (outbox.TemporalTarget, error) { return tt.target, nil }}
			err := pub.Publish(ctx, tenantDelivery("r1", "x", tenant, 1))
			permanent(t, err)
			var te *outbox.TargetError
			require.ErrorAs(t, err, &te)
			require.Equal(t, tt.field, te.Field, "%T: %v", tt.target, err)
			require.Contains(t, err.Error(), tt.field)
		}
		notStarted(t, "refused")
	})

	// A client without the tenant propagator would lose the tenant: every path refuses a message
	// with one, and still delivers one without.
	t.Run("NoTenantPropagator", func(t *testing.T) {
		for _, p := range paths {
			id := "no-propagator-" + p.name
			err := publisher(c, p, id, variant{}).Publish(ctx, tenantDelivery("n1", "x", tenant, 1))
			permanent(t, err)
			require.ErrorIs(t, err, outbox.ErrNoTenantPropagator, p.name)
			notStarted(t, id)
		}
		pub := &outbox.TemporalPublisher{Client: c, Route: func(outbox.Delivery) (outbox.TemporalTarget, error) {
			return outbox.StartWorkflow{Options: client.StartWorkflowOptions{TaskQueue: tenantQueue}, Workflow: "Inbox", Args: []any{"n"}}, nil
		}}
		err := pub.Publish(ctx, tenantDelivery("n2", "x", tenant, 1))
		require.ErrorIs(t, err, outbox.ErrNoTenantPropagator)
		notStarted(t, "events/n2")
		require.NoError(t, pub.Publish(ctx, tenantDelivery("n3", "x", "", 1)))
		var result inboxState
		finish(t, tc, "events/n3", &result)
		require.Empty(t, result.Tenant)
	})

	t.Run("InvalidTenant", func(t *testing.T) {
		for _, p := range paths {
			id := "invalid-tenant-" + p.name
			err := publisher(tc, p, id, variant{}).Publish(ctx, tenantDelivery("i1", "x", "bad\xfftenant", 1))
			permanent(t, err)
			require.Contains(t, err.Error(), "not a valid tenant")
			notStarted(t, id)
		}
	})
}
