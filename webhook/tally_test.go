package webhook_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/webhook"
)

// manualTimer stands for time.AfterFunc in a handler's tally (SetTallyTimer, export_test.go): it
// remembers the flush scheduled, and the test fires it.
type manualTimer struct {
	mu      sync.Mutex
	armed   int // how many flushes were scheduled
	pending func()
}

func (m *manualTimer) after(_ time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed++
	m.pending = f
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		was := m.pending != nil
		m.pending = nil
		return was
	}
}

// scheduled reports how many flushes were scheduled, and whether one waits.
func (m *manualTimer) scheduled() (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.armed, m.pending != nil
}

// fire runs the scheduled flush, as the timer would.
func (m *manualTimer) fire(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	f := m.pending
	m.pending = nil
	m.mu.Unlock()
	require.NotNil(t, f, "no flush is scheduled")
	f()
}

// tallyHook is a handler with a manual flush timer, served over HTTP, with a count, in the
// database, of the statements that write its schema's webhook_tallies.
type tallyHook struct {
	hook
	timer *manualTimer
	url   string
}

func newTallyHook(t *testing.T, cfg webhook.HandlerConfig) tallyHook {
	t.Helper()
	k := tallyHook{hook: newHook(t, cfg), timer: &manualTimer{}}
	webhook.SetTallyTimer(k.Handler, k.timer.after)
	srv := httptest.NewServer(k.Handler)
	t.Cleanup(srv.Close)
	k.url = srv.URL
	// A statement-level trigger counts every INSERT statement on the table, whatever rows it
	// inserts or updates: what the database was made to do, counted by the database.
	k.exec(t, `CREATE TABLE {{schema}}.tally_statements (n int NOT NULL);
		INSERT INTO {{schema}}.tally_statements VALUES (0);
		CREATE FUNCTION {{schema}}.count_tally_statement() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN UPDATE {{schema}}.tally_statements SET n = n + 1; RETURN NULL; END $$;
		CREATE TRIGGER count_statements AFTER INSERT ON {{schema}}.webhook_tallies
			FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_tally_statement()`)
	return k
}

// statements returns how many statements wrote the tallies.
func (k tallyHook) statements(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT n FROM "+k.schema+".tally_statements").Scan(&n))
	return n
}

// send POSTs body with header over HTTP (GET when method says so), and returns the status.
func (k tallyHook) send(t *testing.T, method string, header http.Header, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(method, k.url+"/", bytes.NewReader(body))
	require.NoError(t, err)
	for name, values := range header {
		req.Header[name] = values
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	return res.StatusCode
}

// tallies reads the tallies back as the operator does.
func (k tallyHook) tallies(t *testing.T) []operator.WebhookTally {
	t.Helper()
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: strings.Trim(k.schema, `"`)})
	require.NoError(t, err)
	out, err := op.WebhookTallies(context.Background(), time.Hour)
	require.NoError(t, err)
	for i := range out {
		out[i].Last = time.Time{}
	}
	return out
}

// forged is a delivery signed with a secret the handler does not have.
func forged(id string) (http.Header, []byte) {
	body := event(id, 1)
	return stripeHeader(webhook.SignStripe("whsec_not_the_endpoints", now, body)), body
}

// Deliveries accepted, duplicate and refused for each reason the handler tells apart, over
// HTTP, are counted and, once flushed, read back by the operator with their counts, in one
// statement.
func TestTalliesCountWhatTheHandlerAnswered(t *testing.T) {
	t.Parallel()
	const maxBody = 1024
	k := newTallyHook(t, webhook.HandlerConfig{MaxBodyBytes: maxBody})
	signed := func(id string, at time.Time, body []byte) http.Header {
		return stripeHeader(webhook.SignStripe(stripeSecret, at, body))
	}
	send := func(want int, method string, header http.Header, body []byte) {
		t.Helper()
		require.Equal(t, want, k.send(t, method, header, body))
	}
	first, second := event("evt_1", 1000), event("evt_2", 1000)
	send(http.StatusOK, http.MethodPost, signed("evt_1", now, first), first)
	send(http.StatusOK, http.MethodPost, signed("evt_2", now, second), second)
	send(http.StatusOK, http.MethodPost, signed("evt_1", now, first), first) // a duplicate
	send(http.StatusOK, http.MethodPost, signed("evt_1", now, first), first) // another
	for i := range 3 {
		header, body := forged("evt_forged_" + string(rune('a'+i)))
		send(http.StatusUnauthorized, http.MethodPost, header, body)
	}
	send(http.StatusUnauthorized, http.MethodPost, nil, first) // no signature at all
	send(http.StatusBadRequest, http.MethodPost, signed("evt_3", now.Add(-time.Hour), first), first)
	large := append(bytes.Repeat([]byte(" "), maxBody), first...)
	send(http.StatusRequestEntityTooLarge, http.MethodPost, signed("evt_4", now, large), large)
	notJSON := []byte("not json")
	send(http.StatusBadRequest, http.MethodPost, signed("evt_5", now, notJSON), notJSON)
	send(http.StatusMethodNotAllowed, http.MethodGet, nil, nil)
	other := event("evt_1", 2000) // evt_1 again, with another amount
	send(http.StatusConflict, http.MethodPost, signed("evt_1", now, other), other)

	require.Zero(t, k.statements(t), "a request wrote the tallies")
	require.Empty(t, k.tallies(t))
	k.timer.fire(t)
	require.Equal(t, 1, k.statements(t))
	require.Equal(t, []operator.WebhookTally{{
		Source: "stripe", Accepted: 2, Duplicate: 2, Refused: 9,
		Reasons: map[string]int64{"signature": 4, "stale": 1, "oversized": 1, "malformed": 1, "method": 1, "mismatch": 1},
	}}, k.tallies(t))

	// More counts after the flush: added to the same minute's rows by the next flush.
	send(http.StatusOK, http.MethodPost, signed("evt_1", now, first), first)
	require.NoError(t, k.Close(context.Background()))
	require.Equal(t, 2, k.statements(t))
	got := k.tallies(t)
	require.Len(t, got, 1)
	require.Equal(t, int64(3), got[0].Duplicate)
}

// A flood of forged deliveries is counted in memory: no request writes, one flush is scheduled
// however many arrive, and each flush is one statement for all of them. A Close with nothing
// counted writes nothing.
func TestTalliesFloodIsOneStatementPerFlush(t *testing.T) {
	t.Parallel()
	k := newTallyHook(t, webhook.HandlerConfig{})
	flood := func(n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				header, body := forged("evt_" + strings.Repeat("x", i%7+1))
				if status := k.send(t, http.MethodPost, header, body); status != http.StatusUnauthorized {
					t.Errorf("status %d, want 401", status)
				}
			})
		}
		wg.Wait()
	}

	flood(300)
	require.Zero(t, k.statements(t), "a request wrote the tallies")
	armed, pending := k.timer.scheduled()
	require.Equal(t, 1, armed, "each request scheduled a flush of its own")
	require.True(t, pending)
	k.timer.fire(t)
	require.Equal(t, 1, k.statements(t))

	flood(200)
	require.Equal(t, 1, k.statements(t), "a request wrote the tallies")
	k.timer.fire(t)
	require.Equal(t, 2, k.statements(t))
	armed, pending = k.timer.scheduled()
	require.Equal(t, 2, armed)
	require.False(t, pending, "a flush is scheduled with nothing to flush")

	require.NoError(t, k.Close(context.Background()))
	require.Equal(t, 2, k.statements(t), "Close wrote with nothing counted")
	require.Equal(t, []operator.WebhookTally{{Source: "stripe", Refused: 500, Reasons: map[string]int64{"signature": 500}}}, k.tallies(t))
}

// While a flush waits for the database (here, a lock an owner holds on the table), requests are
// answered, and counted for the next flush, which the running one schedules.
func TestTallyFlushHoldsUpNoRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := newTallyHook(t, webhook.HandlerConfig{})
	header, body := forged("evt_1")
	require.Equal(t, http.StatusUnauthorized, k.send(t, http.MethodPost, header, body))

	lock, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, "LOCK TABLE "+k.schema+".webhook_tallies IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	fired := make(chan struct{})
	go func() { defer close(fired); k.timer.fire(t) }()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE NOT granted AND relation = to_regclass($1))`, k.schema+".webhook_tallies").Scan(&waiting))
		return waiting
	}, time.Minute, 10*time.Millisecond, "the flush does not wait for the lock")

	for range 20 {
		require.Equal(t, http.StatusUnauthorized, k.send(t, http.MethodPost, header, body), "a request waited for the flush")
	}
	require.NoError(t, lock.Rollback(ctx))
	<-fired
	require.Equal(t, 1, k.statements(t))
	// The requests answered during the flush saw it scheduled, and scheduled none: the flush
	// schedules the next for them.
	armed, pending := k.timer.scheduled()
	require.Equal(t, 2, armed)
	require.True(t, pending, "the counts taken during the flush wait for no flush")
	k.timer.fire(t)
	require.Equal(t, 2, k.statements(t))
	require.Equal(t, []operator.WebhookTally{{Source: "stripe", Refused: 21, Reasons: map[string]int64{"signature": 21}}}, k.tallies(t))
}

// A flush the database refuses (the table is missing) keeps its counts: Close says what is
// wrong, and once the table is back the next Close writes them all.
func TestTalliesKeptWhenTheFlushFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := newTallyHook(t, webhook.HandlerConfig{})
	header, body := forged("evt_1")
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, k.send(t, http.MethodPost, header, body))
	}
	k.exec(t, "DROP TABLE {{schema}}.webhook_tallies")
	err := k.Close(ctx)
	require.ErrorIs(t, err, migrate.ErrNotMigrated)
	require.ErrorContains(t, err, `source "stripe"`)

	migrations, err := migrate.List(strings.Trim(k.schema, `"`))
	require.NoError(t, err)
	for _, m := range migrations {
		if m.Name == "webhook_tallies" {
			k.exec(t, m.Up)
		}
	}
	require.Equal(t, http.StatusUnauthorized, k.send(t, http.MethodPost, header, body))
	require.NoError(t, k.Close(ctx))
	require.Equal(t, []operator.WebhookTally{{Source: "stripe", Refused: 4, Reasons: map[string]int64{"signature": 4}}}, k.tallies(t))
}
