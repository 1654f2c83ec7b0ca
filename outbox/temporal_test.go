package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// TemporalPublisher on a real dev server (the one make test installs into bin/): Temporal's own
// deduplication, by workflow ID and by update ID, absorbs the outbox's repeated deliveries.

const taskQueue = "outbox-temporal"

// startedWorkflow is what the StartWorkflow tests start: it waits for a "finish" signal and
// returns its argument.
func startedWorkflow(ctx workflow.Context, payload string) (string, error) {
	workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	return payload, nil
}

// seen is what eventsWorkflow has seen: how many times its "event" update handler ran, per
// update ID and per event (the update's argument).
type seen struct {
	ByUpdate map[string]int
	ByEvent  map[string]int
}

// eventsWorkflow records every run of its "event" update handler (query "seen") until it gets a
// "finish" signal, and returns what it saw. Its validator rejects the event "invalid"; its handler
// runs for the event "fail" and then returns an error.
func eventsWorkflow(ctx workflow.Context) (seen, error) {
	s := seen{ByUpdate: map[string]int{}, ByEvent: map[string]int{}}
	err := workflow.SetUpdateHandlerWithOptions(ctx, "event", func(ctx workflow.Context, event string) (int, error) {
		id := workflow.GetCurrentUpdateInfo(ctx).ID
		s.ByUpdate[id]++
		s.ByEvent[event]++
		if event == "fail" {
			return 0, errors.New("the handler refuses this event")
		}
		return s.ByUpdate[id], nil
	}, workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, event string) error {
		if event == "invalid" {
			return errors.New("the validator rejects this event")
		}
		return nil
	}})
	if err != nil {
		return seen{}, err
	}
	if err := workflow.SetQueryHandler(ctx, "seen", func() (seen, error) { return s, nil }); err != nil {
		return seen{}, err
	}
	workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	err = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return s, err
}

// devServer starts a dev server and a worker of the test workflows on it, both stopped when t
// ends, and returns the server's client.
func devServer(t *testing.T) client.Client {
	t.Helper()
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	c := devserver.ForTest(t, cli, client.Options{Logger: tlog.NewStructuredLogger(quiet)})

	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(startedWorkflow, workflow.RegisterOptions{Name: "Started"})
	w.RegisterWorkflowWithOptions(eventsWorkflow, workflow.RegisterOptions{Name: "Events"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return c
}

// runID returns the run ID of the latest run of workflow id.
func runID(t *testing.T, c client.Client, id string) string {
	t.Helper()
	d, err := c.DescribeWorkflow(context.Background(), id, "")
	require.NoError(t, err)
	return d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// executions returns how many runs of workflow id the namespace's visibility lists.
func executions(t *testing.T, c client.Client, id string) int {
	t.Helper()
	resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", id)})
	require.NoError(t, err)
	return len(resp.GetExecutions())
}

// seenBy queries eventsWorkflow id.
func seenBy(t *testing.T, c client.Client, id string) seen {
	t.Helper()
	v, err := c.QueryWorkflow(context.Background(), id, "", "seen")
	require.NoError(t, err)
	var s seen
	require.NoError(t, v.Get(&s))
	return s
}

// finish signals workflow id to finish, waits for it to complete and decodes its result.
func finish(t *testing.T, c client.Client, id string, result any) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.SignalWorkflow(ctx, id, "", "finish", nil))
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, result))
}

// redeliver makes a delivered message pending again, as if its dispatcher had died after
// publishing and before marking it.
func redeliver(t *testing.T, name, id string) {
	t.Helper()
	tag, err := pgtest.Pool(t).Exec(context.Background(),
		"UPDATE "+name+".outbox SET state = 'pending', delivered_at = NULL, lease_until = NULL, available_at = now() WHERE id = $1 AND state = 'delivered'", id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func TestTemporalPublisher(t *testing.T) {
	t.Parallel()
	c := devServer(t)

	t.Run("StartWorkflow", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		o, name := setup(t, nil)
		pub := &outbox.TemporalPublisher{Client: c, Route: func(d outbox.Delivery) (outbox.TemporalTarget, error) {
			return outbox.StartWorkflow{Options: client.StartWorkflowOptions{TaskQueue: taskQueue}, Workflow: "Started", Args: []any{string(d.Payload)}}, nil
		}}
		m := outbox.Message{ID: "order-1", Topic: "order.placed", Payload: []byte("order 1 placed")}
		const id = "order.placed/order-1" // the default workflow ID: topic/message ID

		// Published twice: the second finds the first's workflow running.
		require.NoError(t, pub.Publish(ctx, outbox.Delivery{Message: m, Attempt: 1}))
		first := runID(t, c, id)
		require.NoError(t, pub.Publish(ctx, outbox.Delivery{Message: m, Attempt: 2}))
		require.Equal(t, first, runID(t, c, id))

		// Through a dispatcher, delivered again after a crash before the mark.
		put(t, ctx, o, m)
		d := newDispatcher(t, o, pub, outbox.DispatcherConfig{})
		drain(t, ctx, d, o)
		redeliver(t, name, m.ID)
		drain(t, ctx, d, o)
		require.Equal(t, row{State: "delivered", Attempts: 2}, rowOf(t, name, m.ID))
		require.Equal(t, first, runID(t, c, id))

		// Delivered again after the workflow completed: the closed workflow keeps its ID.
		var result string
		finish(t, c, id, &result)
		require.Equal(t, "order 1 placed", result)
		require.NoError(t, pub.Publish(ctx, outbox.Delivery{Message: m, Attempt: 3}))
		require.Equal(t, first, runID(t, c, id), "a delivery after completion started another run")
		require.Eventually(t, func() bool { return executions(t, c, id) == 1 }, 30*time.Second, 20*time.Millisecond)

		// Another message is another workflow.
		other := outbox.Message{ID: "order-2", Topic: "order.placed", Payload: []byte("order 2 placed")}
		require.NoError(t, pub.Publish(ctx, outbox.Delivery{Message: other, Attempt: 1}))
		require.NotEqual(t, first, runID(t, c, "order.placed/order-2"))
		finish(t, c, "order.placed/order-2", &result)
		require.Equal(t, "order 2 placed", result)
	})

	t.Run("UpdateWorkflow", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		const id = "events-update"
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, "Events")
		require.NoError(t, err)
		target := func(workflowID string, skipClosed bool) *outbox.TemporalPublisher {
			return &outbox.TemporalPublisher{Client: c, Route: func(d outbox.Delivery) (outbox.TemporalTarget, error) {
				return outbox.UpdateWorkflow{WorkflowID: workflowID, UpdateName: "event", Args: []any{string(d.Payload)}, SkipClosed: skipClosed}, nil
			}}
		}
		pub := target(id, false)
		delivery := func(messageID, event string) outbox.Delivery {
			return outbox.Delivery{Message: outbox.Message{ID: messageID, Topic: "events", Payload: []byte(event)}, Attempt: 1}
		}

		// Three times in a row, and three times at once.
		for range 3 {
			require.NoError(t, pub.Publish(ctx, delivery("m1", "paid")))
		}
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = pub.Publish(ctx, delivery("m2", "shipped")) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, seen{ByUpdate: map[string]int{"m1": 1, "m2": 1}, ByEvent: map[string]int{"paid": 1, "shipped": 1}}, seenBy(t, c, id))

		// Another message ID runs, even with the same event.
		require.NoError(t, pub.Publish(ctx, delivery("m3", "paid")))
		require.Equal(t, 1, seenBy(t, c, id).ByUpdate["m3"])

		// An update whose handler fails, or that the validator rejects, is permanent; the
		// failed one is not run again.
		for range 2 {
			err := pub.Publish(ctx, delivery("m4", "fail"))
			require.Error(t, err)
			require.True(t, outbox.IsPermanent(err), "%v", err)
			err = pub.Publish(ctx, delivery("m5", "invalid"))
			require.Error(t, err)
			require.True(t, outbox.IsPermanent(err), "%v", err)
		}
		s := seenBy(t, c, id)
		require.Equal(t, 1, s.ByUpdate["m4"])
		require.NotContains(t, s.ByUpdate, "m5")

		// A closed workflow, or one that never ran, is permanent, unless SkipClosed.
		var result seen
		finish(t, c, id, &result)
		require.Equal(t, map[string]int{"m1": 1, "m2": 1, "m3": 1, "m4": 1}, result.ByUpdate)
		for _, workflowID := range []string{id, "never-started"} {
			err := target(workflowID, false).Publish(ctx, delivery("m6", "late"))
			require.Error(t, err)
			require.True(t, outbox.IsPermanent(err), "%s: %v", workflowID, err)
			require.NoError(t, target(workflowID, true).Publish(ctx, delivery("m6", "late")), workflowID)
		}

		// No client, no route, or a route's error: permanent.
		for _, p := range []*outbox.TemporalPublisher{
			{Route: pub.Route},
			{Client: c},
			{Client: c, Route: func(outbox.Delivery) (outbox.TemporalTarget, error) { return nil, errors.New("unknown topic") }},
			{Client: c, Route: func(outbox.Delivery) (outbox.TemporalTarget, error) { return nil, nil }},
		} {
			err := p.Publish(ctx, delivery("m7", "x"))
			require.True(t, outbox.IsPermanent(err), "%v", err)
		}
	})

	// Signal, signal-with-start, update-with-start, tenants: temporal_paths_test.go.
	t.Run("Targets", func(t *testing.T) {
		t.Parallel()
		testTargets(t, c)
	})

	// A Stripe event reaches the workflow named in it exactly once: through the webhook
	// handler, the outbox and a dispatcher, with the same delivery POSTed five times at once, once
	// more later, and the message published again after a dispatcher's crash.
	t.Run("WebhookEndToEnd", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		o, name := setup(t, nil)
		const (
			id     = "order-e2e"
			secret = "whsec_e2e_0123456789"
		)
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, "Events")
		require.NoError(t, err)

		h, err := webhook.NewHandler(pgtest.Pool(t), o, webhook.HandlerConfig{
			Source: "stripe", Verifier: webhook.Stripe{Secrets: []string{secret}}, Logger: quiet,
		})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)

		// The workflow is named in the (verified) event; the event ID is the update's argument.
		route := func(d outbox.Delivery) (outbox.TemporalTarget, error) {
			var e struct {
				Data struct {
					Object struct {
						Metadata struct {
							WorkflowID string `json:"workflow_id"`
						} `json:"metadata"`
					} `json:"object"`
				} `json:"data"`
			}
			if err := json.Unmarshal(d.Payload, &e); err != nil {
				return nil, err
			}
			return outbox.UpdateWorkflow{WorkflowID: e.Data.Object.Metadata.WorkflowID, UpdateName: "event", Args: []any{d.Headers[webhook.HeaderID]}}, nil
		}
		d := newDispatcher(t, o, &outbox.TemporalPublisher{Client: c, Route: route}, outbox.DispatcherConfig{Poll: 20 * time.Millisecond})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(runCtx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

		body := []byte(`{"id":"evt_e2e","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","metadata":{"workflow_id":"` + id + `"}}}}`)
		post := func() int {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(string(body)))
			require.NoError(t, err)
			req.Header.Set("Stripe-Signature", webhook.SignStripe(secret, time.Now(), body))
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		messageID := webhook.MessageID("stripe", "", "evt_e2e")
		delivered := func() bool { return rowOf(t, name, messageID).State == "delivered" }

		statuses := make([]int, 5)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Go(func() { statuses[i] = post() })
		}
		wg.Wait()
		require.Equal(t, []int{200, 200, 200, 200, 200}, statuses)
		require.Eventually(t, delivered, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 200, post())
		require.Equal(t, 1, count(t, name))

		// The dispatcher died after publishing: the message goes out again, and Temporal
		// absorbs it by its update ID.
		redeliver(t, name, messageID)
		require.Eventually(t, func() bool { return rowOf(t, name, messageID).Attempts == 2 && delivered() }, 30*time.Second, 10*time.Millisecond)

		var result seen
		finish(t, c, id, &result)
		require.Equal(t, seen{ByUpdate: map[string]int{messageID: 1}, ByEvent: map[string]int{"evt_e2e": 1}}, result)
	})
}
