package webhook_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/webhook"
)

// redelivery is one delivery of an explored history: an event ID, the version of its content
// (0, or 1 for a body whose event differs: a conflict), and its delivery metadata (Stripe's
// pending_webhooks and request, which a Stripe redelivery may change).
type redelivery struct {
	id       string
	content  int
	metadata int
}

// body is the Stripe-like event of d, with Stripe's delivery metadata in it.
func (d redelivery) body() []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"invoice.paid","data":{"object":{"amount":%d}},"pending_webhooks":%d,"request":{"id":"req_%d","idempotency_key":null}}`,
		d.id, 100+d.content, d.metadata, d.metadata)
}

// sameEvent is the reference model of the intake's decision: whether b is a redelivery of a (200,
// nothing stored) rather than a conflict (409). For Stripe, delivery metadata is not the event;
// for the other schemes, every byte of the body is.
func sameEvent(scheme string, a, b redelivery) bool {
	if scheme == "Stripe" {
		return a.content == b.content
	}
	return a == b
}

// TestExploreIntakeDecisions explores the intake's duplicate/conflict decision against the model
// sameEvent, on the real Postgres, for each scheme: seeded histories of deliveries of a few event
// IDs, each delivered up to five times with its content or a conflicting one, and its delivery
// metadata varied, shuffled and sent by one to four concurrent senders. Whatever the
// interleaving, each event ID is put in the outbox exactly once, with the body of the one
// delivery answered as new; every delivery of the same event (per the model) is answered 200 as
// a duplicate, every other 409; nothing else is stored. With one sender, the first delivery of
// each ID in sending order is the one taken.
//
// TEMPOTENT_EXPLORE_WEBHOOK_N histories (default 4) from TEMPOTENT_EXPLORE_SEED (default 1); a
// failure names its seed, and TEMPOTENT_EXPLORE_SEED=<seed> TEMPOTENT_EXPLORE_WEBHOOK_N=1 replays
// its choices (the interleaving of concurrent senders is the scheduler's).
func TestExploreIntakeDecisions(t *testing.T) {
	t.Parallel()
	n := envInt("TEMPOTENT_EXPLORE_WEBHOOK_N", 4)
	seed := uint64(envInt("TEMPOTENT_EXPLORE_SEED", 1))
	for _, sc := range schemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			for i := range uint64(n) {
				exploreIntake(t, sc, seed+i)
			}
		})
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// exploreIntake runs the history of seed on a fresh handler of sc, and checks it against the model.
func exploreIntake(t *testing.T, sc scheme, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	k := newHook(t, webhook.HandlerConfig{Verifier: sc.verifier(sc.secret)})
	var queue []redelivery
	events := 1 + rng.IntN(4)
	for e := range events {
		for range 1 + rng.IntN(5) {
			d := redelivery{id: fmt.Sprintf("evt_%d", e), metadata: rng.IntN(3)}
			if rng.IntN(4) == 0 {
				d.content = 1
			}
			queue = append(queue, d)
		}
	}
	rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
	senders := 1 + rng.IntN(4)
	history := fmt.Sprintf("seed %d, %s, %d senders, deliveries %+v; replay: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_WEBHOOK_N=1 go test -race -run 'TestExploreIntakeDecisions/%s' ./webhook/",
		seed, sc.name, senders, queue, seed, sc.name)

	type result struct {
		status int
		answer answer
	}
	results := make([]result, len(queue))
	next := make(chan int)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for i := range next {
				body := queue[i].body()
				w := k.post("/", sc.sign(t, sc.secret, queue[i].id, now, body), body)
				results[i].status = w.Code
				_ = json.Unmarshal(w.Body.Bytes(), &results[i].answer)
			}
		})
	}
	for i := range queue {
		next <- i
	}
	close(next)
	wg.Wait()

	// The event each ID was taken as: the delivery whose body the outbox holds.
	stored := map[string][]byte{}
	for _, m := range k.messages(t) {
		require.NotContains(t, stored, m.Headers[webhook.HeaderID], "%s: two messages for one event", history)
		stored[m.Headers[webhook.HeaderID]] = m.Payload
		require.Equal(t, webhook.MessageID("stripe", "", m.Headers[webhook.HeaderID]), m.ID, history)
	}
	require.Len(t, stored, events, "%s: each event ID is put once", history)
	require.Equal(t, rows{Inbox: events, Outbox: events}, k.rows(t), history)
	// A body is one redelivery value (ID, content, metadata): the one the outbox holds is the
	// taken one.
	taken := map[string]redelivery{}
	for _, d := range queue {
		if string(d.body()) == string(stored[d.id]) {
			taken[d.id] = d
		}
	}
	news := map[string]int{}
	seen := map[string]bool{}
	for i, d := range queue {
		got := results[i]
		first, ok := taken[d.id]
		require.True(t, ok, "%s: no delivery of %s has the stored body", history, d.id)
		if senders == 1 && !seen[d.id] {
			require.Equal(t, answer{Received: true}, got.answer, "%s: delivery %d (%+v), the first of its ID, was not taken as new", history, i, d)
		}
		seen[d.id] = true
		switch {
		case !sameEvent(sc.name, first, d):
			require.Equal(t, http.StatusConflict, got.status, "%s: delivery %d (%+v) of another event than the taken %+v", history, i, d, first)
		case got.answer == answer{Received: true}:
			require.Equal(t, http.StatusOK, got.status, history)
			require.Equal(t, first, d, "%s: delivery %d was taken as new but the outbox holds another body", history, i)
			news[d.id]++
		default:
			require.Equal(t, http.StatusOK, got.status, "%s: delivery %d (%+v) of the taken event %+v", history, i, d, first)
			require.Equal(t, answer{Received: true, Duplicate: true}, got.answer, "%s: delivery %d", history, i)
		}
	}
	for id := range stored {
		require.Equal(t, 1, news[id], "%s: %s answered as new %d times", history, id, news[id])
	}
}
