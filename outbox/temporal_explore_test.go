package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/outbox"
)

// exploreTargets runs seeded random histories on each path against a reference model: deliveries
// and redeliveries of a few messages, the workflow started (by the test, for the paths that do
// not start it) and closed at random points. The model says what each Publish returns and what
// the workflow has handled when it closes: each message at most once, whatever the repeats.
func exploreTargets(t *testing.T, tc client.Client) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(6) {
				explorePath(t, tc, p, seed)
			}
		})
	}
}

// pathModel is what one workflow ID has been through. The with-start targets keep the reuse
// policy RejectDuplicate, so the ID has one run at most.
type pathModel struct {
	started, running bool
	handled          []string // messages the run handled, in order
}

// publish returns what a delivery of message m should give ("nil" or "permanent"), and
// records what the workflow will handle.
func (m *pathModel) publish(p path, message string) string {
	switch {
	case !m.started && p.starts:
		m.started, m.running = true, true
		m.handled = append(m.handled, message)
		return "nil"
	case m.running:
		if !slices.Contains(m.handled, message) {
			m.handled = append(m.handled, message)
		}
		return "nil"
	case m.started && !p.signal && slices.Contains(m.handled, message):
		return "nil" // the closed run's outcome of this update
	default:
		return "permanent" // never started, or closed
	}
}

func explorePath(t *testing.T, tc client.Client, p path, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 3))
	id := fmt.Sprintf("explore-%s-%d", p.name, seed)
	pub := publisher(tc, p, id, variant{})
	var model pathModel
	var trace []string
	fail := func() string { return fmt.Sprintf("seed %d, history: %s", seed, strings.Join(trace, ", ")) }
	// closeRun closes the running workflow and checks it handled what the model says, once each.
	closeRun := func() {
		for _, m := range model.handled { // signals are handled after Publish returns
			awaitEvent(t, tc, id, m)
		}
		var result inboxState
		finish(t, tc, id, &result)
		model.running = false
		for _, m := range model.handled {
			require.Equal(t, 1, result.Events[m].Times, "%s handled %d times; %s", m, result.Events[m].Times, fail())
		}
		require.Len(t, result.Events, len(model.handled), fail())
	}
	for range 12 {
		switch op := rng.IntN(10); {
		case op <= 2 && !p.starts && !model.started:
			trace = append(trace, "start")
			_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tenantQueue}, "Inbox", "started by the test")
			require.NoError(t, err, fail())
			model.started, model.running = true, true
		case op <= 1 && model.running:
			trace = append(trace, "close")
			closeRun()
		default:
			message := fmt.Sprintf("x%d", rng.IntN(4))
			want := model.publish(p, message)
			trace = append(trace, message+"→"+want)
			err := pub.Publish(ctx, tenantDelivery(message, "event "+message, "", 1+rng.IntN(3)))
			if want == "nil" {
				require.NoError(t, err, fail())
			} else {
				require.True(t, outbox.IsPermanent(err), "got %v; %s", err, fail())
			}
		}
	}
	if model.running {
		closeRun()
	}
}
