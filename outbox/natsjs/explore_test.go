package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/natsjs"
)

// TestExploreRepublish explores, by model, seeded histories of one outbox and one stream in
// which messages are put (ordered on a few keys, or not) while dispatchers, in random order:
// dispatch a batch; die between the publish and the mark (a dispatcher whose pool is closed
// after some of its batch reached the stream: nothing it publishes is recorded, and its claims
// hold until the lease ends); lose acks (the stream stored the message, the publisher reports a
// failure, and the message is retried after a backoff); or wait out the lease so that the dead
// dispatchers' messages are claimed again. Meanwhile messages already in the stream are published
// again directly, as a frozen dispatcher waking up would. A healthy dispatcher then drains the
// outbox.
//
// The model is the list of messages put. After every step the stream holds no ID twice, only IDs
// put, and each ordering key's messages as a prefix of the order they were put in; at the end it
// holds exactly the IDs put, each once, every key in order, and no message is dead.
//
// It runs TEMPOTENT_EXPLORE_NATS_N histories (default 3) from TEMPOTENT_EXPLORE_SEED (default 1);
// a failing history prints its seed and trace, and TEMPOTENT_EXPLORE_SEED=<seed>
// TEMPOTENT_EXPLORE_NATS_N=1 replays its choices (real timing varies from run to run).
func TestExploreRepublish(t *testing.T) {
	t.Parallel()
	n := exploreEnv("TEMPOTENT_EXPLORE_NATS_N", 3)
	seed := uint64(exploreEnv("TEMPOTENT_EXPLORE_SEED", 1))
	js := connect(t, startServer(t))
	failed := 0
	for i := range uint64(n) {
		s := seed + i
		x := &explorer{t: t, rng: rand.New(rand.NewPCG(s, 7)), js: js, stream: fmt.Sprint("H", s)}
		if err := x.history(context.Background()); err != nil {
			failed++
			t.Errorf("explore: history with seed %d failed: %v\n%s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_NATS_N=1 go test -race -v -run TestExploreRepublish .",
				s, err, strings.Join(x.trace, "\n"), s)
			if failed >= 3 {
				break
			}
		}
	}
	if failed == 0 {
		t.Logf("explore: %d histories from seed %d, the stream held every message once, in order", n, seed)
	}
}

func exploreEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const exploreLease = time.Second

type explorer struct {
	t      *testing.T
	rng    *rand.Rand
	js     jetstream.JetStream
	stream string
	o      *outbox.Outbox
	pub    *natsjs.Publisher
	put    []outbox.Message // the model: every message put, in commit order
	trace  []string
}

func (x *explorer) logf(format string, args ...any) {
	x.trace = append(x.trace, fmt.Sprintf(format, args...))
}

func (x *explorer) history(ctx context.Context) error {
	createStream(x.t, x.js, x.stream, window, x.stream+".>")
	schema := pgtest.Schema(x.t)
	if err := migrate.Up(ctx, pgtest.Pool(x.t), schema); err != nil {
		return err
	}
	var err error
	if x.o, err = outbox.New(pgtest.Pool(x.t), &outbox.Config{Schema: schema}); err != nil {
		return err
	}
	if x.pub, err = natsjs.New(ctx, x.js, x.stream, nil); err != nil {
		return err
	}
	healthy := x.dispatcher(x.pub, pgtest.Pool(x.t), x.rng.IntN(5)+1)
	steps := 30 + x.rng.IntN(20)
	for step := range steps {
		switch r := x.rng.IntN(100); {
		case r < 30:
			x.putSome(ctx)
		case r < 50:
			n, err := healthy.DispatchOnce(ctx)
			x.logf("%d: dispatch: %d claimed, %v", step, n, err)
			if err != nil {
				return err
			}
		case r < 70:
			if err := x.crash(ctx, step); err != nil {
				return err
			}
		case r < 82:
			x.loseAcks(ctx, step)
		case r < 92:
			x.republish(ctx, step)
		default:
			x.logf("%d: wait out the lease", step)
			time.Sleep(exploreLease)
		}
		if err := x.check(false); err != nil {
			return fmt.Errorf("after step %d: %w", step, err)
		}
	}
	x.logf("drain")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := healthy.DispatchOnce(ctx); err != nil {
			return err
		}
		st, err := x.o.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Dead > 0 {
			return fmt.Errorf("%d messages dead", st.Dead)
		}
		if st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages still pending after 30 s", st.Pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return x.check(true)
}

// dispatcher returns a dispatcher of the explored outbox on pool.
func (x *explorer) dispatcher(pub outbox.Publisher, pool *pgxpool.Pool, batch int) *outbox.Dispatcher {
	o, err := outbox.New(pool, &outbox.Config{Schema: x.o.Schema()})
	if err != nil {
		x.t.Fatal(err)
	}
	return newDispatcher(x.t, o, pub, outbox.DispatcherConfig{Batch: batch, Concurrency: 1, Lease: exploreLease, MaxAttempts: 1000})
}

// putSome puts one to three messages in one transaction.
func (x *explorer) putSome(ctx context.Context) {
	var msgs []outbox.Message
	for range x.rng.IntN(3) + 1 {
		m := outbox.Message{ID: fmt.Sprint("m", len(x.put)+len(msgs)), Topic: x.stream + ".event", Payload: []byte("p")}
		if k := x.rng.IntN(4); k < 3 {
			m.OrderingKey = fmt.Sprint("k", k)
		}
		msgs = append(msgs, m)
	}
	put(x.t, x.o, msgs...)
	x.put = append(x.put, msgs...)
	x.logf("put %d messages", len(msgs))
}

// crash runs a dispatcher that publishes the first k messages of its batch and then dies: its
// pool closes, so that nothing it did is recorded, and the rest of its batch is never published.
func (x *explorer) crash(ctx context.Context, step int) error {
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	k := int32(x.rng.IntN(4))
	var calls atomic.Int32
	var published []string
	dying := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		if calls.Add(1) > k {
			pool.Close() // the process is gone: nothing more reaches the stream or the outbox
			return errors.New("dead")
		}
		published = append(published, d.ID)
		err := x.pub.Publish(ctx, d)
		if calls.Load() == k {
			pool.Close()
		}
		return err
	})
	n, err := x.dispatcher(dying, pool, x.rng.IntN(5)+1).DispatchOnce(ctx)
	x.logf("%d: crash after %d publishes: %d claimed, published %v, (%v)", step, k, n, published, err)
	return nil
}

// loseAcks dispatches a batch whose publishes reach the stream but whose acks are reported lost
// for a random half: those are retried after a backoff.
func (x *explorer) loseAcks(ctx context.Context, step int) {
	var lost []string
	lossy := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		if err := x.pub.Publish(ctx, d); err != nil {
			return err
		}
		if x.rng.IntN(2) == 0 {
			lost = append(lost, d.ID)
			return errors.New("ack lost")
		}
		return nil
	})
	n, err := x.dispatcher(lossy, pgtest.Pool(x.t), x.rng.IntN(5)+1).DispatchOnce(ctx)
	x.logf("%d: lose acks: %d claimed, lost %v (%v)", step, n, lost, err)
}

// republish publishes again, directly, a message the stream holds.
func (x *explorer) republish(ctx context.Context, step int) {
	held := contents(x.t, x.js, x.stream)
	if len(held) == 0 {
		return
	}
	id := held[x.rng.IntN(len(held))].ID
	i := slices.IndexFunc(x.put, func(m outbox.Message) bool { return m.ID == id })
	err := x.pub.Publish(ctx, outbox.Delivery{Message: x.put[i], Attempt: 99})
	x.logf("%d: republish %s: %v", step, id, err)
	if err != nil {
		x.t.Errorf("republish %s: %v", id, err)
	}
}

// check compares the stream with the model: no ID twice, only IDs put, each key in put order (a
// prefix of it, or all of it when final), and, when final, every ID put.
func (x *explorer) check(final bool) error {
	held := contents(x.t, x.js, x.stream)
	seen := map[string]bool{}
	byKey := map[string][]string{}
	for _, m := range held {
		if seen[m.ID] {
			return fmt.Errorf("the stream holds %s twice", m.ID)
		}
		seen[m.ID] = true
		byKey[m.OrderingKey] = append(byKey[m.OrderingKey], m.ID)
	}
	want := map[string][]string{}
	for _, m := range x.put {
		want[m.OrderingKey] = append(want[m.OrderingKey], m.ID)
		if final && !seen[m.ID] {
			return fmt.Errorf("%s was put and is not in the stream", m.ID)
		}
		delete(seen, m.ID)
	}
	if len(seen) > 0 {
		return fmt.Errorf("the stream holds IDs never put: %v", seen)
	}
	for key, ids := range byKey {
		if key == "" {
			continue
		}
		if w := want[key]; len(ids) > len(w) || !slices.Equal(ids, w[:len(ids)]) || final && len(ids) != len(w) {
			return fmt.Errorf("key %s: the stream holds %v, put in the order %v", key, ids, w)
		}
	}
	return nil
}
