package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/kafka"
)

// The environment of the dispatcher process that TestDispatcherKilledBetweenProduceAndMark
// starts and kills: this test binary again, running only that test.
const (
	envChild   = "TEMPOTENT_KAFKA_CRASH_CHILD" // set: be the dispatcher
	envSchema  = "TEMPOTENT_KAFKA_CRASH_SCHEMA"
	envBrokers = "TEMPOTENT_KAFKA_CRASH_BROKERS" // comma-separated
	envStopAt  = "TEMPOTENT_KAFKA_CRASH_STOP_AT" // the message ID after whose produce it waits to be killed
	childLease = 2 * time.Second
)

// TestDispatcherKilledBetweenProduceAndMark runs a dispatcher in a process of its own and kills
// it with SIGKILL after the broker acknowledged one message's record and before the dispatcher
// marked it delivered. Once that claim's lease ends, a dispatcher of this process produces the
// message again: exactly that ID has two records (the idempotent producer of the dead process
// cannot deduplicate across clients), no ID is missing, and a consumer that deduplicates on
// the header through an inbox processes each ID once.
func TestDispatcherKilledBetweenProduceAndMark(t *testing.T) {
	if os.Getenv(envChild) != "" {
		crashChild(t)
		return
	}
	t.Parallel()
	c := newCluster(t, "orders")
	out, pool := newOutbox(t)
	const n = 20
	keys := []string{"order-a", "order-b", "order-c"}
	for i := range n {
		put(t, pool, out, outbox.Message{ID: msgID(i), Topic: "orders", OrderingKey: keys[i%len(keys)], Payload: []byte(msgID(i))})
	}
	stopAt := msgID(n / 2)

	cmd := exec.Command(os.Args[0], "-test.run=^TestDispatcherKilledBetweenProduceAndMark$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envChild+"=1", envSchema+"="+out.Schema(),
		envBrokers+"="+strings.Join(c.ListenAddrs(), ","), envStopAt+"="+stopAt)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	child, err := proc.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(child.Kill)
	produced := make(chan string, 1)
	var output strings.Builder
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			output.WriteString(sc.Text() + "\n")
			if id, ok := strings.CutPrefix(sc.Text(), "produced "); ok {
				produced <- id
				return
			}
		}
		close(produced)
	}()
	select {
	case id, ok := <-produced:
		require.True(t, ok, "the dispatcher process ended before producing %s:\n%s%s", stopAt, output.String(), stderr.String())
		require.Equal(t, stopAt, id)
	case <-time.After(time.Minute):
		require.FailNow(t, "the dispatcher process did not produce "+stopAt)
	}
	child.Kill()

	var state string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT state FROM "+out.Schema()+".outbox WHERE id = $1", stopAt).Scan(&state))
	require.Equal(t, "pending", state, "the killed dispatcher produced %s but did not mark it", stopAt)

	pub, err := kafka.New(newClient(t, c), nil)
	require.NoError(t, err)
	d, err := outbox.NewDispatcher(out, pub, &outbox.DispatcherConfig{Maintenance: -1})
	require.NoError(t, err)
	drain(t, out, d)

	records := consume(t, c, "orders", n+1)
	require.Len(t, records, n+1, "every message once, and the one whose mark the kill lost twice")
	perID := counts(records)
	for i := range n {
		want := 1
		if msgID(i) == stopAt {
			want = 2
		}
		require.Equal(t, want, perID[msgID(i)], "records of %s", msgID(i))
	}
	var attempts []string
	for _, r := range records {
		if kafka.MessageID(r) == stopAt {
			attempts = append(attempts, header(t, r, kafka.HeaderAttempt))
		}
	}
	require.Equal(t, []string{"1", "2"}, attempts, "the second record of %s is the next claim's", stopAt)
	for key, ids := range byKey(records) {
		var want []string
		for i := range n {
			if keys[i%len(keys)] == key {
				want = append(want, msgID(i))
			}
		}
		require.Equal(t, want, ids, "first appearances of key %s in put order", key)
	}

	ran := processOnce(t, pool, out.Schema(), records)
	require.Len(t, ran, n)
	for id, times := range ran {
		require.Equal(t, 1, times, "the consumer processed %s", id)
	}
}

// crashChild is the dispatcher process: it dispatches one message at a time, so that every
// message before stopAt is marked before the next is claimed, and after stopAt's produce it says
// so and waits for the kill.
func crashChild(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	require.NoError(t, err)
	out, err := outbox.New(pool, &outbox.Config{Schema: os.Getenv(envSchema)})
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(os.Getenv(envBrokers), ",")...))
	require.NoError(t, err)
	pub, err := kafka.New(cl, nil)
	require.NoError(t, err)
	stopAt := os.Getenv(envStopAt)
	d, err := outbox.NewDispatcher(out, outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		err := pub.Publish(ctx, d)
		if err == nil && d.ID == stopAt {
			fmt.Println("produced " + d.ID)
			select {} // until SIGKILL
		}
		return err
	}), &outbox.DispatcherConfig{Batch: 1, Concurrency: 1, Lease: childLease, Maintenance: -1})
	require.NoError(t, err)
	require.NoError(t, d.Run(ctx))
}
