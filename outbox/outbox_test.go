package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// TestMain fails the binary if a goroutine outlives the tests: dispatchers run publishers and a
// listener on goroutines of their own.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// setup returns an outbox in a fresh, migrated schema.
func setup(t *testing.T, cfg *outbox.Config) (*outbox.Outbox, string) {
	t.Helper()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pgtest.Pool(t), name))
	c := outbox.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = name
	o, err := outbox.New(pgtest.Pool(t), &c)
	require.NoError(t, err)
	return o, name
}

// put puts msgs in one committed transaction.
func put(t *testing.T, ctx context.Context, o *outbox.Outbox, msgs ...outbox.Message) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		for _, m := range msgs {
			if err := o.Put(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}))
}

// row is a message's row, as the tests look at it.
type row struct {
	State    string
	Attempts int
	Error    string
}

func rowOf(t *testing.T, name, id string) row {
	t.Helper()
	var r row
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT state, attempts, coalesce(last_error, '') FROM "+name+".outbox WHERE id = $1", id).Scan(&r.State, &r.Attempts, &r.Error))
	return r
}

func count(t *testing.T, name string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+name+".outbox").Scan(&n))
	return n
}

func TestPutIsPartOfTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)

	err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		require.NoError(t, o.Put(ctx, tx, outbox.Message{ID: "m1", Topic: "order.placed", Payload: []byte(`{}`)}))
		return errors.New("the business change failed")
	})
	require.Error(t, err)
	require.Zero(t, count(t, name), "a message put in a transaction that rolled back was kept")

	put(t, ctx, o, outbox.Message{ID: "m1", Topic: "order.placed", Payload: []byte(`{}`)})
	require.Equal(t, row{State: "pending"}, rowOf(t, name, "m1"))
}

func TestPutSameIDTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	m := outbox.Message{ID: "m1", Topic: "order.placed", OrderingKey: "order-1", Payload: []byte(`{"n":1}`), Headers: map[string]string{"a": "1"}}
	put(t, ctx, o, m)
	put(t, ctx, o, m) // a retried transaction
	require.Equal(t, 1, count(t, name))

	for field, other := range map[string]outbox.Message{
		"payload":      {ID: "m1", Topic: m.Topic, OrderingKey: m.OrderingKey, Payload: []byte(`{"n":2}`), Headers: m.Headers},
		"topic":        {ID: "m1", Topic: "order.paid", OrderingKey: m.OrderingKey, Payload: m.Payload, Headers: m.Headers},
		"ordering key": {ID: "m1", Topic: m.Topic, OrderingKey: "order-2", Payload: m.Payload, Headers: m.Headers},
		"headers":      {ID: "m1", Topic: m.Topic, OrderingKey: m.OrderingKey, Payload: m.Payload, Headers: map[string]string{"a": "2"}},
	} {
		err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
			err := o.Put(ctx, tx, other)
			require.ErrorIs(t, err, outbox.ErrMismatch, field)
			// The transaction is still usable: the conflict did not abort it.
			_, err = tx.Exec(ctx, "SELECT 1")
			return err
		})
		require.NoError(t, err, field)
	}
	require.Equal(t, 1, count(t, name))
}

func TestPutRefusesBadMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, &outbox.Config{MaxPayloadBytes: 8})
	for _, tc := range []struct {
		name string
		m    outbox.Message
		want error
	}{
		{"no topic", outbox.Message{ID: "x"}, outbox.ErrInvalidMessage},
		{"no ID outside a receipt", outbox.Message{Topic: "t"}, outbox.ErrInvalidMessage},
		{"empty header name", outbox.Message{ID: "x", Topic: "t", Headers: map[string]string{"": "v"}}, outbox.ErrInvalidMessage},
		{"oversized", outbox.Message{ID: "x", Topic: "t", Payload: make([]byte, 9)}, outbox.ErrPayloadTooLarge},
	} {
		err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error { return o.Put(ctx, tx, tc.m) })
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	require.Zero(t, count(t, name))
}

// Inside a receipt, a message without an ID gets one from the receipt's token: the same on every
// attempt of the intent, different per topic and ordering key, different per intent.
func TestPutDerivesIDsInsideAReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	inReceipt := func(token string) context.Context { return keys.WithToken(ctx, keys.Token(token)) }

	put(t, inReceipt("tok-1"), o, outbox.Message{Topic: "order.reserved", Payload: []byte("a")})
	put(t, inReceipt("tok-1"), o, outbox.Message{Topic: "order.reserved", Payload: []byte("a")}) // the next attempt
	require.Equal(t, 1, count(t, name))
	put(t, inReceipt("tok-1"), o, outbox.Message{Topic: "order.reserved", OrderingKey: "k", Payload: []byte("a")})
	put(t, inReceipt("tok-2"), o, outbox.Message{Topic: "order.reserved", Payload: []byte("a")})
	require.Equal(t, 3, count(t, name))
	require.Equal(t, "pending", rowOf(t, name, outbox.IDFor("tok-1", "order.reserved", "")).State)
}

// Two transactions that put ordered messages on one key commit in the order of their messages:
// the second waits for the first, so that the dispatcher never sees the later message first.
func TestOrderedPutsCommitInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	pool := pgtest.Pool(t)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }() // after a failure; a no-op after the commit
	require.NoError(t, o.Put(ctx, first, outbox.Message{ID: "first", Topic: "t", OrderingKey: "k"}))

	secondDone := make(chan error, 1)
	go func() {
		secondDone <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return o.Put(ctx, tx, outbox.Message{ID: "second", Topic: "t", OrderingKey: "k"})
		})
	}()
	select {
	case err := <-secondDone:
		t.Fatalf("the second transaction put a message on the key while the first held it: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, first.Commit(ctx))
	require.NoError(t, <-secondDone)

	var order []string
	rows, err := pool.Query(ctx, "SELECT id FROM "+name+".outbox ORDER BY seq")
	require.NoError(t, err)
	order, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"first", "second"}, order)

	// Unordered messages, and other keys, do not wait.
	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	require.NoError(t, o.Put(ctx, other, outbox.Message{ID: "held", Topic: "t", OrderingKey: "k"}))
	put(t, ctx, o, outbox.Message{ID: "free", Topic: "t"}, outbox.Message{ID: "other-key", Topic: "t", OrderingKey: "k2"})
}

func TestStatsPruneRequeueDiscard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, &outbox.Config{Retention: time.Hour})
	put(t, ctx, o,
		outbox.Message{ID: "old", Topic: "t"}, outbox.Message{ID: "new", Topic: "t"},
		outbox.Message{ID: "pending", Topic: "t"}, outbox.Message{ID: "dead", Topic: "t"})
	_, err := pgtest.Pool(t).Exec(ctx, `UPDATE `+name+`.outbox SET
		state = CASE id WHEN 'old' THEN 'delivered' WHEN 'new' THEN 'delivered' WHEN 'dead' THEN 'dead' ELSE state END,
		delivered_at = CASE id WHEN 'old' THEN now() - interval '2 hours' WHEN 'new' THEN now() END,
		created_at = now() - interval '1 minute'`)
	require.NoError(t, err)

	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Pending)
	require.Equal(t, int64(1), st.Dead)
	require.InDelta(t, time.Minute.Seconds(), st.OldestPending.Seconds(), 5)

	n, err := o.Prune(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the delivered message past retention is pruned")
	require.Equal(t, 3, count(t, name))

	require.ErrorIs(t, o.Requeue(ctx, "pending"), outbox.ErrNotDead)
	require.ErrorIs(t, o.Discard(ctx, "new"), outbox.ErrNotDead)
	require.NoError(t, o.Requeue(ctx, "dead"))
	require.Equal(t, row{State: "pending"}, rowOf(t, name, "dead"))
}

// recorder is a publisher that records each delivery and checks that no message is published by
// two calls at once, and no ordering key has two messages in flight.
type recorder struct {
	mu        sync.Mutex
	inFlight  map[string]bool // message IDs and "key:"+ordering keys
	published map[string]int
	byKey     map[string][]string // ordering key → message IDs in publish order
	overlaps  []string
	fail      func(d outbox.Delivery) error
	hold      time.Duration
}

func newRecorder() *recorder {
	return &recorder{inFlight: map[string]bool{}, published: map[string]int{}, byKey: map[string][]string{}}
}

func (r *recorder) Publish(ctx context.Context, d outbox.Delivery) error {
	r.mu.Lock()
	for _, k := range r.flightKeys(d) {
		if r.inFlight[k] {
			r.overlaps = append(r.overlaps, k)
		}
		r.inFlight[k] = true
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, k := range r.flightKeys(d) {
			delete(r.inFlight, k)
		}
		r.mu.Unlock()
	}()
	if r.hold > 0 {
		time.Sleep(r.hold)
	}
	if r.fail != nil {
		if err := r.fail(d); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published[d.ID]++
	if d.OrderingKey != "" {
		r.byKey[d.OrderingKey] = append(r.byKey[d.OrderingKey], d.ID)
	}
	return nil
}

func (r *recorder) flightKeys(d outbox.Delivery) []string {
	if d.OrderingKey == "" {
		return []string{d.ID}
	}
	return []string{d.ID, "key:" + d.OrderingKey}
}

func (r *recorder) snapshot() (published map[string]int, byKey map[string][]string, overlaps []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	published = map[string]int{}
	for k, v := range r.published {
		published[k] = v
	}
	byKey = map[string][]string{}
	for k, v := range r.byKey {
		byKey[k] = append([]string(nil), v...)
	}
	return published, byKey, append([]string(nil), r.overlaps...)
}

// An outbox whose schema was never migrated says so, and how to fix it.
func TestPutBeforeMigrateSaysWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error { return o.Put(ctx, tx, outbox.Message{ID: "m", Topic: "t"}) })
	require.ErrorIs(t, err, migrate.ErrNotMigrated)
	require.ErrorContains(t, err, "Migrate")
	require.ErrorContains(t, o.Check(ctx), "Migrate")
}
