package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/natsjs"
)

const window = 10 * time.Minute

// ordersPublisher starts a server with the stream ORDERS on order.>, and returns a publisher to it.
func ordersPublisher(t *testing.T) (jetstream.JetStream, *natsjs.Publisher) {
	t.Helper()
	js := connect(t, startServer(t))
	createStream(t, js, "ORDERS", window, "order.>")
	pub, err := natsjs.New(context.Background(), js, "ORDERS", nil)
	require.NoError(t, err)
	return js, pub
}

// A real dispatcher on the real database delivers N messages through the publisher, and the
// stream holds N, each with its ID, topic subject, headers and payload, ordered keys in order.
func TestDispatcherDeliversEachMessageToTheStreamOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	js := connect(t, s)
	createStream(t, js, "ORDERS", window, "order.>")
	o, _ := setupOutbox(t)
	pub, err := natsjs.New(context.Background(), js, "ORDERS", nil)
	require.NoError(t, err)

	const n = 60
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, outbox.Message{
			ID: fmt.Sprint("m", i), Topic: "order.placed", OrderingKey: fmt.Sprint("k", i%3),
			Payload: []byte(fmt.Sprint(i)), Headers: map[string]string{"Trace": fmt.Sprint("t", i)},
		})
	}
	put(t, o, msgs...)
	drain(t, newDispatcher(t, o, pub, outbox.DispatcherConfig{Batch: 16}), o)

	got := contents(t, js, "ORDERS")
	require.Len(t, got, n)
	byKey := map[string][]string{}
	for _, m := range got {
		require.Equal(t, "order.placed", m.Subject)
		require.Equal(t, "1", m.Attempt)
		require.Equal(t, m.ID, "m"+m.Payload)
		byKey[m.OrderingKey] = append(byKey[m.OrderingKey], m.ID)
	}
	for k := range 3 {
		var want []string
		for i := k; i < n; i += 3 {
			want = append(want, fmt.Sprint("m", i))
		}
		require.Equal(t, want, byKey[fmt.Sprint("k", k)], "key k%d out of order in the stream", k)
	}
	st, err := js.Stream(context.Background(), "ORDERS")
	require.NoError(t, err)
	msg, err := st.GetMsg(context.Background(), got[0].Seq)
	require.NoError(t, err)
	require.Equal(t, "order.placed", msg.Header.Get(outbox.HeaderTopic))
	require.Equal(t, "t"+got[0].Payload, msg.Header.Get("Trace"))
}

// A second publish of a message ID is acked as a duplicate, reported delivered, and not stored.
func TestRepublishIsDeliveredAndNotStored(t *testing.T) {
	t.Parallel()
	js, pub := ordersPublisher(t)
	d := outbox.Delivery{Message: outbox.Message{ID: "a", Topic: "order.placed", Payload: []byte("x")}, Attempt: 1}
	require.NoError(t, pub.Publish(context.Background(), d))
	d.Attempt = 2
	require.NoError(t, pub.Publish(context.Background(), d))
	other := d
	other.ID = "b"
	require.NoError(t, pub.Publish(context.Background(), other))
	got := contents(t, js, "ORDERS")
	require.Equal(t, []string{"a", "b"}, []string{got[0].ID, got[1].ID})
	require.Len(t, got, 2)
	require.Equal(t, "1", got[0].Attempt, "the stream holds the first publish")
}

// Each refusal gives its typed error, with a message that says what to do; the publish-time
// ones are permanent, so that the dispatcher parks the message instead of retrying it.
func TestRefusals(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	js := connect(t, s)
	ctx := context.Background()
	createStream(t, js, "ORDERS", window, "order.>")
	createStream(t, js, "SHORT", 2*time.Minute, "short.>")
	createStream(t, js, "OTHER", window, "other.>")

	t.Run("ShortDuplicateWindow", func(t *testing.T) {
		t.Parallel()
		_, err := natsjs.New(ctx, js, "SHORT", nil)
		var we *natsjs.WindowError
		require.ErrorAs(t, err, &we)
		require.Equal(t, natsjs.WindowError{Stream: "SHORT", Window: 2 * time.Minute, Min: natsjs.MinDuplicateWindowDefault}, *we)
		require.ErrorContains(t, err, "set the stream's Duplicates to at least 5m31s")

		_, err = natsjs.New(ctx, js, "SHORT", &natsjs.Config{MinDuplicateWindow: 2 * time.Minute})
		require.NoError(t, err, "a window of exactly the minimum is enough")
		_, err = natsjs.New(ctx, js, "ORDERS", &natsjs.Config{MinDuplicateWindow: window + time.Second})
		require.ErrorAs(t, err, &we)
	})
	t.Run("MissingStreamAtNew", func(t *testing.T) {
		t.Parallel()
		_, err := natsjs.New(ctx, js, "NOPE", nil)
		var se *natsjs.StreamError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "NOPE", se.Stream)
		require.ErrorContains(t, err, "stream NOPE does not exist; create it")
		require.ErrorContains(t, err, "--dupe-window 5m31s")

		pub, err := natsjs.New(ctx, js, "NOPE", &natsjs.Config{SkipStreamCheck: true})
		require.NoError(t, err, "SkipStreamCheck reads no stream info")
		err = pub.Publish(ctx, delivery("nope.x"))
		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.ErrorAs(t, err, &se)
		require.Equal(t, "nope.x", se.Subject)
		require.ErrorContains(t, err, "no stream takes subject nope.x: create stream NOPE, or add nope.x to its Subjects")
	})
	pub, err := natsjs.New(ctx, js, "ORDERS", nil)
	require.NoError(t, err)
	t.Run("SubjectNoStreamTakes", func(t *testing.T) {
		t.Parallel()
		err := pub.Publish(ctx, delivery("invoice.sent"))
		require.True(t, outbox.IsPermanent(err), "%v", err)
		var se *natsjs.StreamError
		require.ErrorAs(t, err, &se)
		require.Equal(t, natsjs.StreamError{Stream: "ORDERS", Subject: "invoice.sent", Window: natsjs.MinDuplicateWindowDefault, Err: se.Err}, *se)
		require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	})
	t.Run("SubjectOfAnotherStream", func(t *testing.T) {
		t.Parallel()
		err := pub.Publish(ctx, delivery("other.thing"))
		require.True(t, outbox.IsPermanent(err), "%v", err)
		var se *natsjs.StreamError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "OTHER", se.Other)
		require.ErrorContains(t, err, "subject other.thing is taken by stream OTHER, not by ORDERS")
		require.Empty(t, contents(t, js, "OTHER"), "the message went to a stream whose window was never checked")
	})
	t.Run("BadSubject", func(t *testing.T) {
		t.Parallel()
		for _, subject := range []string{"", "order. placed", "order..placed", ".order", "order.", "order.*", "order.>", "order\tx"} {
			err := pub.Publish(ctx, delivery(subject))
			require.True(t, outbox.IsPermanent(err), "%q: %v", subject, err)
			var se *natsjs.SubjectError
			require.ErrorAs(t, err, &se, "%q", subject)
			require.Equal(t, subject, se.Subject)
			require.ErrorContains(t, err, fmt.Sprintf("subject %q (of topic %q) is not a NATS subject to publish on: ", subject, subject))
		}
		mapped, err := natsjs.New(ctx, js, "ORDERS", &natsjs.Config{Subject: func(d outbox.Delivery) (string, error) {
			if d.Topic == "unknown" {
				return "", errors.New("no route")
			}
			return "order." + d.Topic, nil
		}})
		require.NoError(t, err)
		require.NoError(t, mapped.Publish(ctx, delivery("placed")))
		require.Equal(t, "order.placed", contents(t, js, "ORDERS")[0].Subject, "Config.Subject was not used")
		err = mapped.Publish(ctx, delivery("unknown"))
		var se *natsjs.SubjectError
		require.ErrorAs(t, err, &se)
		require.True(t, outbox.IsPermanent(err))
		require.ErrorContains(t, err, `no subject for topic "unknown": Config.Subject failed: no route`)
		require.EqualError(t, errors.Unwrap(se), "no route")
	})
	t.Run("HeaderNATSWouldAlter", func(t *testing.T) {
		t.Parallel()
		for _, d := range []outbox.Delivery{
			{Message: outbox.Message{ID: "a\n", Topic: "order.x"}},
			{Message: outbox.Message{ID: " a", Topic: "order.x"}},
			{Message: outbox.Message{ID: "h", Topic: "order.x", Headers: map[string]string{"Bad Name": "v"}}},
			{Message: outbox.Message{ID: "h", Topic: "order.x", Headers: map[string]string{"X": "v\r\n"}}},
			{Message: outbox.Message{ID: "h", Topic: "order.x", OrderingKey: "k "}},
		} {
			err := pub.Publish(ctx, d)
			require.True(t, outbox.IsPermanent(err), "%+v: %v", d, err)
			var he *natsjs.HeaderError
			require.ErrorAs(t, err, &he, "%+v", d)
			require.ErrorContains(t, err, "give IDs and headers without line breaks or surrounding whitespace")
			require.NoError(t, errors.Unwrap(he))
		}
	})
}

func delivery(topic string) outbox.Delivery {
	return outbox.Delivery{Message: outbox.Message{ID: "id-" + topic, Topic: topic}, Attempt: 1}
}

// A lost connection and a timeout are retryable: the message is tried again after a backoff.
func TestConnectionLossAndTimeoutAreRetryable(t *testing.T) {
	t.Parallel()
	js, pub := ordersPublisher(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	err := pub.Publish(ctx, delivery("order.late"))
	require.Error(t, err)
	require.False(t, outbox.IsPermanent(err), "%v", err)

	js.Conn().Close()
	err = pub.Publish(context.Background(), delivery("order.closed"))
	require.Error(t, err)
	require.False(t, outbox.IsPermanent(err), "%v", err)
}

func TestNewNeedsAStreamAndAClient(t *testing.T) {
	t.Parallel()
	_, err := natsjs.New(context.Background(), nil, "S", nil)
	require.ErrorContains(t, err, "js is nil")
	s := startServer(t)
	js := connect(t, s)
	_, err = natsjs.New(context.Background(), js, "", nil)
	require.ErrorContains(t, err, "stream name is empty")
	_, err = natsjs.New(context.Background(), js, "S", &natsjs.Config{MinDuplicateWindow: -time.Second})
	require.ErrorContains(t, err, "MinDuplicateWindow")
}

func TestRetryHorizon(t *testing.T) {
	t.Parallel()
	require.Equal(t, natsjs.MinDuplicateWindowDefault, natsjs.RetryHorizon(nil))
	require.Equal(t, 5*time.Minute+31*time.Second, natsjs.RetryHorizon(&outbox.DispatcherConfig{}))
	require.Equal(t, 10*time.Second+time.Minute+2*time.Second,
		natsjs.RetryHorizon(&outbox.DispatcherConfig{Lease: 10 * time.Second, BackoffMax: time.Minute, Poll: 2 * time.Second}))
}

// A message above the stream's size limit, and a header name NATS does not take, are permanent:
// the same message is refused every time.
func TestOversizeAndBadHeaderNameArePermanent(t *testing.T) {
	t.Parallel()
	js := connect(t, startServer(t))
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small.>"}, Duplicates: window, MaxMsgSize: 1024})
	require.NoError(t, err)
	pub, err := natsjs.New(context.Background(), js, "SMALL", nil)
	require.NoError(t, err)
	require.Equal(t, "SMALL", pub.Stream())

	big := delivery("small.big")
	big.Payload = make([]byte, 4096)
	err = pub.Publish(context.Background(), big)
	require.True(t, outbox.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "raise the stream's max_msg_size")

	named := delivery("small.named")
	named.Headers = map[string]string{"Größe": "1"}
	err = pub.Publish(context.Background(), named)
	require.True(t, outbox.IsPermanent(err), "%v", err)
	var he *natsjs.HeaderError
	require.ErrorAs(t, err, &he)
	require.ErrorContains(t, err, "NATS refused the headers")
	require.Empty(t, contents(t, js, "SMALL"))
}

// New's error for stream info it cannot read says what to do.
func TestCheckThatCannotReadTheStreamSaysWhatToDo(t *testing.T) {
	t.Parallel()
	js, _ := ordersPublisher(t)
	js.Conn().Close()
	_, err := natsjs.New(context.Background(), js, "ORDERS", nil)
	require.ErrorContains(t, err, "read the info of stream ORDERS")
	require.ErrorContains(t, err, "set Config.SkipStreamCheck")
	var se *natsjs.StreamError
	require.False(t, errors.As(err, &se), "an unreadable stream is not a missing one")
}
