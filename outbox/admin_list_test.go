package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// seeded is a message of the list test's outbox as the reference model holds it.
type seeded struct {
	seq              int64
	id, topic, key   string
	state, lastError string
	ageHours         int // created ageHours and a half ago
}

// seedOutbox puts n random messages in o's table and sets their state, error and age directly,
// as dispatchers and time would have: ages are whole hours and a half, so that a filter in
// whole hours is never within a statement's duration of one.
func seedOutbox(t *testing.T, ctx context.Context, o *outbox.Outbox, name string, rng *rand.Rand, n int) []seeded {
	t.Helper()
	topics := []string{"order.placed", "order.paid", "refund"}
	keyset := []string{"", "", "", "cust-1", "cust-2", "cust-3", "cust-4", "cust-5", "cust-6", "cust-7", "cust-8"}
	states := []string{outbox.StatePending, outbox.StateDead, outbox.StateDead, outbox.StateDelivered}
	errs := []string{"", "HTTP 503 Service Unavailable", "connection refused", "http 400: bad %_request"}
	var ms []seeded
	var msgs []outbox.Message
	for i := range n {
		m := seeded{id: fmt.Sprintf("m%03d", i), topic: topics[rng.IntN(len(topics))], key: keyset[rng.IntN(len(keyset))],
			state: states[rng.IntN(len(states))], lastError: errs[rng.IntN(len(errs))], ageHours: rng.IntN(6)}
		ms = append(ms, m)
		msgs = append(msgs, outbox.Message{ID: m.id, Topic: m.topic, OrderingKey: m.key, Payload: []byte(m.id)})
	}
	put(t, ctx, o, msgs...)
	for i, m := range ms {
		require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `UPDATE `+name+`.outbox SET state = $2, last_error = nullif($3, ''),
			delivered_at = CASE WHEN $2 = 'delivered' THEN now() END, attempts = $4,
			created_at = now() - ($5 * 60 + 30) * interval '1 minute' WHERE id = $1 RETURNING seq`,
			m.id, m.state, m.lastError, i%7, m.ageHours).Scan(&ms[i].seq))
	}
	return ms
}

// reference filters ms as f says List does, in f's order, all pages together.
func reference(ms []seeded, f outbox.ListFilter) []string {
	var ids []string
	for _, m := range ms {
		switch {
		case f.State == "" && m.state == outbox.StateDelivered,
			f.State != "" && f.State != outbox.StateAll && m.state != f.State,
			f.Topic != "" && m.topic != f.Topic,
			f.Key != "" && m.key != f.Key,
			f.ErrorContains != "" && !strings.Contains(strings.ToLower(m.lastError), strings.ToLower(f.ErrorContains)),
			f.OlderThan > 0 && float64(m.ageHours)+0.5 <= f.OlderThan.Hours(),
			f.NewerThan > 0 && float64(m.ageHours)+0.5 > f.NewerThan.Hours():
			continue
		}
		ids = append(ids, m.id)
	}
	if f.Newest {
		slices.Reverse(ids)
	}
	return ids
}

// blocker is the first dead message before the undelivered message id on its ordering key.
func blocker(ms []seeded, id string) string {
	i := slices.IndexFunc(ms, func(m seeded) bool { return m.id == id })
	m := ms[i]
	if m.key == "" || m.state == outbox.StateDelivered {
		return ""
	}
	for _, e := range ms[:i] {
		if e.key == m.key && e.state == outbox.StateDead {
			return e.id
		}
	}
	return ""
}

// randomFilter draws a filter over the values seedOutbox uses, and some that match nothing.
func randomFilter(rng *rand.Rand) outbox.ListFilter {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	f := outbox.ListFilter{
		State:         pick("", "", outbox.StatePending, outbox.StateDead, outbox.StateDelivered, outbox.StateAll),
		Topic:         pick("", "", "order.placed", "refund", "nope"),
		Key:           pick("", "", "cust-1", "cust-2", "cust-9"),
		ErrorContains: pick("", "", "503", "REFUSED", "%_", "_", "http"),
		Newest:        rng.IntN(2) == 0,
		Limit:         rng.IntN(8),
	}
	if rng.IntN(3) == 0 {
		f.OlderThan = time.Duration(rng.IntN(6)) * time.Hour
	}
	if rng.IntN(3) == 0 {
		f.NewerThan = time.Duration(rng.IntN(6)) * time.Hour
	}
	return f
}

// listAll walks List's pages from the first and returns the IDs in order, each with the message
// blocking it ("id<blocker"), checking each page's size against the limit.
func listAll(t *testing.T, ctx context.Context, o *outbox.Outbox, f outbox.ListFilter) []string {
	t.Helper()
	limit := f.Limit
	if limit == 0 {
		limit = outbox.ListLimitDefault
	}
	var ids []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 200, "List does not end")
		page, err := o.List(ctx, f)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Messages), limit)
		for _, m := range page.Messages {
			ids = append(ids, m.ID+"<"+m.BlockedBy)
			require.Nil(t, m.Payload, "List returned a payload")
		}
		if page.Next == 0 {
			return ids
		}
		require.Len(t, page.Messages, limit, "a page before the last is not full")
		f.After = page.Next
	}
}

// TestListMatchesReference is the proof of List's filters and pagination: random messages,
// random filters, every page walked, compared with the same filter applied in Go.
// TEMPOTENT_EXPLORE_SEED picks the seed (default 1).
func TestListMatchesReference(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	seed := uint64(1)
	if v, err := strconv.Atoi(os.Getenv("TEMPOTENT_EXPLORE_SEED")); err == nil {
		seed = uint64(v)
	}
	rng := rand.New(rand.NewPCG(seed, 40))
	ms := seedOutbox(t, ctx, o, name, rng, 120)
	for i := range 150 {
		f := randomFilter(rng)
		var want []string
		for _, id := range reference(ms, f) {
			want = append(want, id+"<"+blocker(ms, id))
		}
		require.Equal(t, want, listAll(t, ctx, o, f), "seed %d, filter %d: %+v", seed, i, f)
	}
}

// TestListRefusesBadFilters: a filter out of range is refused before anything is read, naming the
// field.
func TestListRefusesBadFilters(t *testing.T) {
	t.Parallel()
	o, _ := setup(t, nil)
	for field, f := range map[string]outbox.ListFilter{
		"State":     {State: "stuck"},
		"Limit":     {Limit: outbox.ListLimitMax + 1},
		"OlderThan": {OlderThan: -time.Hour},
		"After":     {After: -1},
	} {
		_, err := o.List(context.Background(), f)
		require.ErrorIs(t, err, outbox.ErrInvalidFilter, field)
		require.ErrorContains(t, err, field)
	}
}

// TestGetShowsHeadersAndPayload: Get returns a message whatever its state, with what List leaves
// out; an unknown ID is ErrNoMessage.
func TestGetShowsHeadersAndPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, _ := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "m1", Topic: "order.placed", OrderingKey: "c1", Payload: []byte("\x1b[31mred"),
		Headers: map[string]string{"Trace": "abc"}})
	m, err := o.Get(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, "order.placed", m.Topic)
	require.Equal(t, "c1", m.OrderingKey)
	require.Equal(t, outbox.StatePending, m.State)
	require.Equal(t, []byte("\x1b[31mred"), m.Payload)
	require.Equal(t, map[string]string{"Trace": "abc"}, m.Headers)
	require.Nil(t, m.DeliveredAt)
	_, err = o.Get(ctx, "m2")
	require.ErrorIs(t, err, outbox.ErrNoMessage)
}
