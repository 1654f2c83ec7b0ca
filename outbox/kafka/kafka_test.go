package kafka_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/kafka"
)

// TestDispatcherDelivers runs a real dispatcher over a real outbox: every message becomes one
// record in the mapped topic, keyed by its ordering key, carrying its ID, outbox topic, attempt
// and own headers; each key's records are in put order.
func TestDispatcherDelivers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	out, pool := newOutbox(t)
	pub, err := kafka.New(newClient(t, c), &kafka.Config{Topics: map[string]string{"order.reserved": "orders"}})
	require.NoError(t, err)

	const n = 40
	keys := []string{"order-a", "order-b", "order-c", ""}
	want := map[string][]string{}
	for i := range n {
		key := keys[i%len(keys)]
		put(t, pool, out, outbox.Message{
			ID: msgID(i), Topic: "order.reserved", OrderingKey: key,
			Payload: []byte("payload " + strconv.Itoa(i)), Headers: map[string]string{"trace": "t" + strconv.Itoa(i)},
		})
		want[key] = append(want[key], msgID(i))
	}

	d, err := outbox.NewDispatcher(out, pub, &outbox.DispatcherConfig{Poll: 20 * time.Millisecond, Maintenance: -1})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	records := consume(t, c, "orders", n)
	stop()
	require.NoError(t, <-done)

	require.Len(t, records, n, "one record per message")
	for _, r := range records {
		id := kafka.MessageID(r)
		i, err := strconv.Atoi(strings.TrimPrefix(id, "msg-"))
		require.NoError(t, err, "message ID header %q", id)
		require.Equal(t, "orders", r.Topic)
		require.Equal(t, keys[i%len(keys)], string(r.Key), "key of %s", id)
		if keys[i%len(keys)] == "" {
			require.Nil(t, r.Key, "a message without an ordering key has a nil key")
		}
		require.Equal(t, "payload "+strconv.Itoa(i), string(r.Value))
		require.Equal(t, "order.reserved", header(t, r, kafka.HeaderTopic))
		require.Equal(t, "1", header(t, r, kafka.HeaderAttempt))
		require.Equal(t, "t"+strconv.Itoa(i), header(t, r, "trace"))
	}
	got := byKey(records)
	for _, key := range keys[:3] {
		require.Equal(t, want[key], got[key], "records of key %q in put order", key)
	}
	require.ElementsMatch(t, want[""], got[""])
}

// TestNewRefuses requires each setting that breaks the publisher's contract to be
// refused with a *SettingError that names it, and a bad topic mapping with a *TopicError.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	for _, tc := range []struct {
		name   string
		opts   []kgo.Opt
		option string
	}{
		{"LeaderAck", []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}, "kgo.RequiredAcks"},
		{"NoAck", []kgo.Opt{kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite()}, "kgo.RequiredAcks"},
		{"NotIdempotent", []kgo.Opt{kgo.DisableIdempotentWrite()}, "kgo.DisableIdempotentWrite"},
		{"CancellableInFlight", []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}, "kgo.AllowIdempotentProduceCancellation"},
		{"Transactional", []kgo.Opt{kgo.TransactionalID("tx-1")}, "kgo.TransactionalID"},
		{"ManualFlushing", []kgo.Opt{kgo.ManualFlushing()}, "kgo.ManualFlushing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kafka.New(newClient(t, c, tc.opts...), nil)
			var se *kafka.SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.option, se.Option)
			require.Contains(t, err.Error(), tc.option)
			require.NotEmpty(t, se.Fix)
		})
	}
	t.Run("Defaults", func(t *testing.T) {
		_, err := kafka.New(newClient(t, c, kgo.RequiredAcks(kgo.AllISRAcks())), nil)
		require.NoError(t, err)
	})
	t.Run("NilClient", func(t *testing.T) {
		_, err := kafka.New(nil, nil)
		require.ErrorContains(t, err, "client is nil")
	})
	// Each character just outside a legal range: ` { @ [ / :
	for _, bad := range []string{"", ".", "..", "orders/eu", "ünïcode", strings.Repeat("x", 250), "`", "{", "@", "[", "/", ":"} {
		t.Run("Topic"+strconv.Quote(bad), func(t *testing.T) {
			_, err := kafka.New(newClient(t, c), &kafka.Config{Topics: map[string]string{"order.reserved": "orders", "order.paid": bad}})
			var te *kafka.TopicError
			require.ErrorAs(t, err, &te)
			require.Equal(t, "order.paid", te.OutboxTopic)
			require.Equal(t, bad, te.KafkaTopic)
			require.ErrorContains(t, err, `outbox topic "order.paid" maps to Kafka topic`)
			require.ErrorContains(t, err, "Config.Topics")
		})
	}
	t.Run("LegalTopics", func(t *testing.T) {
		_, err := kafka.New(newClient(t, c), &kafka.Config{Topics: map[string]string{"a": "az.AZ_09-", "b": strings.Repeat("x", 249)}})
		require.NoError(t, err)
	})
}

// TestPublishErrors requires the failures no retry cures to be outbox.Permanent, wrapping
// franz-go's error, and the others to be retried.
func TestPublishErrors(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	delivery := func(topic string, payload []byte) outbox.Delivery {
		return outbox.Delivery{Message: outbox.Message{ID: "m-1", Topic: topic, OrderingKey: "k", Payload: payload}, Attempt: 1}
	}
	publish := func(t *testing.T, pub *kafka.Publisher, d outbox.Delivery) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return pub.Publish(ctx, d)
	}

	t.Run("UnmappedIllegalTopic", func(t *testing.T) {
		pub, err := kafka.New(newClient(t, c), nil)
		require.NoError(t, err)
		err = publish(t, pub, delivery("orders/eu", nil))
		require.True(t, outbox.IsPermanent(err), "%v", err)
		var te *kafka.TopicError
		require.ErrorAs(t, err, &te)
		require.Equal(t, "orders/eu", te.KafkaTopic)
	})
	t.Run("UnknownTopic", func(t *testing.T) {
		pub, err := kafka.New(newClient(t, c, kgo.UnknownTopicRetries(1)), nil)
		require.NoError(t, err)
		err = publish(t, pub, delivery("no.such.topic", nil))
		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
		require.ErrorContains(t, err, "create the topic")
	})
	t.Run("TooLarge", func(t *testing.T) {
		pub, err := kafka.New(newClient(t, c, kgo.ProducerBatchMaxBytes(1024)), nil)
		require.NoError(t, err)
		err = publish(t, pub, delivery("orders", make([]byte, 4096)))
		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.ErrorIs(t, err, kerr.MessageTooLarge)
		require.ErrorContains(t, err, "max.message.bytes")
	})
	// answering publishes through a cluster whose broker answers every produce with code.
	answering := func(t *testing.T, code *kerr.Error) error {
		c := newCluster(t, "orders")
		c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			return produceError(req, code), nil, true
		})
		pub, err := kafka.New(newClient(t, c), nil)
		require.NoError(t, err)
		return publish(t, pub, delivery("orders", nil))
	}
	for _, tc := range []struct {
		name string
		code *kerr.Error
		fix  string
	}{
		{"TopicNotAuthorized", kerr.TopicAuthorizationFailed, "grant"},
		{"ClusterNotAuthorized", kerr.ClusterAuthorizationFailed, "IDEMPOTENT_WRITE"},
		{"InvalidTopic", kerr.InvalidTopicException, "legal Kafka topic"},
		{"BatchTooLarge", kerr.RecordListTooLarge, "max.message.bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := answering(t, tc.code)
			require.True(t, outbox.IsPermanent(err), "%v", err)
			require.ErrorIs(t, err, tc.code)
			require.ErrorContains(t, err, tc.fix)
		})
	}
	t.Run("Retryable", func(t *testing.T) {
		err := answering(t, kerr.NotEnoughReplicas)
		require.ErrorIs(t, err, context.DeadlineExceeded, "franz-go retries it until the context ends")
		require.False(t, outbox.IsPermanent(err), "%v", err)
		require.ErrorContains(t, err, "produce message m-1 to topic orders")
	})
}

// TestMessageID requires the ID from the header, and "" from a record without one.
func TestMessageID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "m-1", kafka.MessageID(&kgo.Record{Headers: []kgo.RecordHeader{{Key: "x", Value: []byte("y")}, {Key: kafka.HeaderMessageID, Value: []byte("m-1")}}}))
	require.Empty(t, kafka.MessageID(&kgo.Record{Headers: []kgo.RecordHeader{{Key: "x", Value: []byte("y")}}}))
}

// produceError answers a produce request with code for every partition.
func produceError(req kmsg.Request, code *kerr.Error) kmsg.Response {
	pr := req.(*kmsg.ProduceRequest)
	resp := pr.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range pr.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
