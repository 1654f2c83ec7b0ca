package kafka_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/kafka"
)

// envSeed replays a run of TestRandomCrashesAndRedeliveries; unset, the seed is the clock's.
const envSeed = "TEMPOTENT_KAFKA_SEED"

// TestRandomCrashesAndRedeliveries interleaves, as a seeded random generator decides, puts of
// messages on a few ordering keys (and none), dispatch rounds whose publisher fails after the
// broker acknowledged the record — the dispatcher dies (its context ends and the publish is cut
// short, so the message is handed back unmarked) or the acknowledgement is lost (an error, so the
// message is retried) — and redeliveries of delivered messages (an operator's reset, or a lease
// lost to a frozen process). The model: every message put appears at least once, exactly one
// extra record per fault, each key's first appearances are in put order, and a consumer that
// deduplicates through an inbox processes each message exactly once.
//
// A failing run logs its seed; TEMPOTENT_KAFKA_SEED=<seed> replays its choices (the interleaving
// with franz-go's and Postgres' timing may still differ).
func TestRandomCrashesAndRedeliveries(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, envSeed)
	}
	t.Logf("seed %d: replay with %s=%d", seed, envSeed, seed)
	rng := rand.New(rand.NewPCG(seed, 40))

	c := newCluster(t, "events")
	out, pool := newOutbox(t)
	pub, err := kafka.New(newClient(t, c), &kafka.Config{Topics: map[string]string{"event": "events"}})
	require.NoError(t, err)

	// The faults, decided by the publisher after each successful produce. mu guards rng and
	// the counts: the dispatcher publishes on goroutines of its own.
	var (
		mu         sync.Mutex
		extra      int                // records beyond one per message: one per fault
		stop       context.CancelFunc // ends the running round: its dispatcher "dies"
		errLostAck = errors.New("the acknowledgement was lost")
	)
	faulty := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		if err := pub.Publish(ctx, d); err != nil {
			return err
		}
		mu.Lock()
		roll := rng.IntN(10)
		if roll < 2 {
			extra++
		}
		cancel := stop
		mu.Unlock()
		switch roll {
		case 0: // the dispatcher dies after the produce: the publish never returns a result
			cancel()
			<-ctx.Done()
			return ctx.Err()
		case 1:
			return errLostAck
		}
		return nil
	})
	d, err := outbox.NewDispatcher(out, faulty, &outbox.DispatcherConfig{
		Batch: 4, Concurrency: 2, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		ShutdownGrace: 50 * time.Millisecond, Maintenance: -1, MaxAttempts: 1000,
	})
	require.NoError(t, err)
	round := func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mu.Lock()
		stop = cancel
		mu.Unlock()
		_, err := d.DispatchOnce(ctx)
		require.NoError(t, err)
	}

	keys := []string{"k0", "k1", "k2", ""}
	var putOrder []string             // every ID put
	putByKey := map[string][]string{} // per ordering key, in put order
	for step := range 150 {
		mu.Lock()
		op := rng.IntN(20)
		mu.Unlock()
		switch {
		case op < 8: // a transaction puts one to three messages
			mu.Lock()
			n := 1 + rng.IntN(3)
			ks := make([]string, n)
			for i := range ks {
				ks[i] = keys[rng.IntN(len(keys))]
			}
			mu.Unlock()
			require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
				for i, key := range ks {
					id := "m-" + strconv.Itoa(step) + "-" + strconv.Itoa(i)
					if err := out.Put(context.Background(), tx, outbox.Message{ID: id, Topic: "event", OrderingKey: key, Payload: []byte(id)}); err != nil {
						return err
					}
				}
				return nil
			}))
			for i, key := range ks {
				id := "m-" + strconv.Itoa(step) + "-" + strconv.Itoa(i)
				putOrder = append(putOrder, id)
				if key != "" {
					putByKey[key] = append(putByKey[key], id)
				}
			}
		case op < 18:
			round()
		default: // a delivered message is delivered again
			if len(putOrder) == 0 {
				continue
			}
			mu.Lock()
			id := putOrder[rng.IntN(len(putOrder))]
			mu.Unlock()
			tag, err := pool.Exec(context.Background(),
				"UPDATE "+out.Schema()+".outbox SET state = 'pending', lease_until = NULL, available_at = now() WHERE id = $1 AND state = 'delivered'", id)
			require.NoError(t, err)
			mu.Lock()
			extra += int(tag.RowsAffected())
			mu.Unlock()
		}
	}
	// No more faults while the outbox drains.
	clean, err := outbox.NewDispatcher(out, pub, &outbox.DispatcherConfig{Maintenance: -1})
	require.NoError(t, err)
	drain(t, out, clean)

	mu.Lock()
	want := len(putOrder) + extra
	mu.Unlock()
	t.Logf("%d messages put, %d faults", len(putOrder), want-len(putOrder))
	records := consume(t, c, "events", want)
	perID := counts(records)
	for _, id := range putOrder {
		require.GreaterOrEqual(t, perID[id], 1, "message %s was put and never produced", id)
	}
	require.Len(t, perID, len(putOrder), "records of messages never put")
	require.Len(t, records, want, "one record per message and one per fault (%d messages, %d faults)", len(putOrder), extra)
	got := byKey(records)
	for _, key := range keys[:3] {
		require.Equal(t, putByKey[key], got[key], "first appearances of key %s in put order", key)
	}
	ran := processOnce(t, pool, out.Schema(), records)
	require.Len(t, ran, len(putOrder))
	for id, times := range ran {
		require.Equal(t, 1, times, "the consumer processed %s", id)
	}
}
