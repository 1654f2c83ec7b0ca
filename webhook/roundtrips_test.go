package webhook_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/webhook"
)

// A delivery takes one round trip to the database, counted by a pgx tracer: the inbox record and
// the outbox message in one statement, committed with it (outbox.Outbox.PutOnce). So does a
// duplicate, and a conflict. Only a handler's first delivery takes one more, to record its
// Source's topic (webhook_endpoints), which the handler then remembers. Refusals take none.
func TestHandlerTakesADeliveryInOneRoundTrip(t *testing.T) {
	t.Parallel()
	counter := &pgtest.Counter{}
	k := newHookOn(t, pgtest.CountingPool(t, counter), webhook.HandlerConfig{})
	post := func(body []byte) (int, int64) {
		counter.Reset()
		w := k.post("/", stripeHeader(webhook.SignStripe(stripeSecret, now, body)), body)
		return w.Code, counter.RoundTrips()
	}
	for _, step := range []struct {
		name   string
		body   []byte
		status int
		trips  int64
	}{
		{"FirstDelivery", event("evt_1", 1000), http.StatusOK, 2},
		{"NewDelivery", event("evt_2", 1000), http.StatusOK, 1},
		{"Duplicate", event("evt_2", 1000), http.StatusOK, 1},
		{"Conflict", event("evt_2", 9999), http.StatusConflict, 1},
	} {
		status, trips := post(step.body)
		require.Equal(t, step.status, status, step.name)
		require.Equal(t, step.trips, trips, "%s: round trips", step.name)
	}
	require.Equal(t, rows{Inbox: 2, Outbox: 2}, k.rows(t))

	counter.Reset()
	body := event("evt_3", 1000)
	w := k.post("/", stripeHeader(webhook.SignStripe(otherSecret, now, body)), body)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Zero(t, counter.RoundTrips(), "a forged delivery reached the database")
}
