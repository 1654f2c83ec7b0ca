package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/kafka"
)

// TestMain fails the binary if a goroutine outlives the tests: the clusters, clients and
// dispatchers each start some.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// partitions is how many partitions each seeded topic has: more than one, so that a key that
// strayed from its partition would show as reordering.
const partitions = 3

// newCluster starts an in-process Kafka cluster with the topics seeded, closed when t ends.
func newCluster(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newClient returns a client of c with franz-go's defaults and opts, closed when t ends.
func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// newOutbox returns an outbox in a fresh schema (dropped when t ends), and the pool.
func newOutbox(t *testing.T) (*outbox.Outbox, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pool, schema))
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	return out, pool
}

// put puts m in a transaction of its own.
func put(t *testing.T, pool *pgxpool.Pool, out *outbox.Outbox, m outbox.Message) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return out.Put(context.Background(), tx, m)
	}))
}

// drain dispatches with d until the outbox has nothing pending, or fails t after a minute.
func drain(t *testing.T, out *outbox.Outbox, d *outbox.Dispatcher) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := d.DispatchOnce(ctx)
		require.NoError(t, err)
		st, err := out.Stats(ctx)
		require.NoError(t, err)
		if st.Pending == 0 {
			require.Zero(t, st.Dead, "messages parked as dead")
			return
		}
		require.True(t, time.Now().Before(deadline), "the outbox did not drain: %+v", st)
		time.Sleep(5 * time.Millisecond)
	}
}

// consume reads topic from the start until it has at least want records and then, for a
// further half second, whatever else arrives, so that a test counting records sees an extra one.
func consume(t *testing.T, c *kfake.Cluster, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var records []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for len(records) < want {
		require.True(t, time.Now().Before(deadline), "only %d of %d records arrived", len(records), want)
		records = append(records, poll(t, cl, time.Second)...)
	}
	return append(records, poll(t, cl, 500*time.Millisecond)...)
}

func poll(t *testing.T, cl *kgo.Client, wait time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	fetches := cl.PollFetches(ctx)
	for _, e := range fetches.Errors() {
		require.ErrorIs(t, e.Err, context.DeadlineExceeded, "fetch %s/%d", e.Topic, e.Partition)
	}
	return fetches.Records()
}

// header returns r's header key, or fails t.
func header(t *testing.T, r *kgo.Record, key string) string {
	t.Helper()
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	require.Failf(t, "header missing", "record at %s/%d@%d has no %s header: %v", r.Topic, r.Partition, r.Offset, key, r.Headers)
	return ""
}

// processOnce hands every record to an inbox consumer, in the order consumed, and returns how
// many times the consumer's function ran per message ID.
func processOnce(t *testing.T, pool *pgxpool.Pool, schema string, records []*kgo.Record) map[string]int {
	t.Helper()
	in, err := inbox.New(pool, inbox.Config{Consumer: "kafka-test", Schema: schema})
	require.NoError(t, err)
	ran := map[string]int{}
	for _, r := range records {
		id := kafka.MessageID(r)
		require.NotEmpty(t, id, "record at %s/%d@%d", r.Topic, r.Partition, r.Offset)
		_, err := in.Process(context.Background(), inbox.Message{ID: id, Payload: r.Value}, func(context.Context, pgx.Tx) error {
			ran[id]++
			return nil
		})
		require.NoError(t, err)
	}
	return ran
}

// byKey groups the message IDs of records by record key, in the order consumed (which is offset
// order within a partition), keeping only the first appearance of each ID.
func byKey(records []*kgo.Record) map[string][]string {
	seen := map[string]bool{}
	out := map[string][]string{}
	for _, r := range records {
		id := kafka.MessageID(r)
		if seen[id] {
			continue
		}
		seen[id] = true
		out[string(r.Key)] = append(out[string(r.Key)], id)
	}
	return out
}

// counts counts the records per message ID.
func counts(records []*kgo.Record) map[string]int {
	n := map[string]int{}
	for _, r := range records {
		n[kafka.MessageID(r)]++
	}
	return n
}

func msgID(i int) string { return fmt.Sprintf("msg-%03d", i) }
