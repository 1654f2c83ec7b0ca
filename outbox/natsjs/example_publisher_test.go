package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/natsjs"
)

// exampleServer starts a NATS server with JetStream in this process, and returns a JetStream
// context on a connection to it and a function that closes both.
func exampleServer() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "natsjs-example-")
	if err != nil {
		panic(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("NATS did not start")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		panic(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	return js, func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

// exampleOutbox connects to TEST_DATABASE_URL (pgtest.ExamplePool), creates tempotent's tables
// in a schema of its own, and returns the schema's outbox, the pool and a cleanup that drops the
// schema.
func exampleOutbox(ctx context.Context, schema string) (*outbox.Outbox, *pgxpool.Pool, func()) {
	pool, cleanup := pgtest.ExamplePool(ctx, schema)
	if err := migrate.Up(ctx, pool, schema); err != nil {
		panic(err)
	}
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	return out, pool, cleanup
}

// The stream takes the topics' subjects and keeps message IDs longer than the dispatcher's retry
// horizon; a dispatcher delivers what the business transaction put, and a second publish of the
// same message is acknowledged as a duplicate and not stored.
func Example() {
	ctx := context.Background()
	js, stop := exampleServer()
	defer stop()
	out, pool, cleanup := exampleOutbox(ctx, "example_natsjs")
	defer cleanup()

	dcfg := outbox.DispatcherConfig{Lease: 10 * time.Second, BackoffMax: time.Minute}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       "ORDERS",
		Subjects:   []string{"order.>"},
		Duplicates: natsjs.RetryHorizon(&dcfg) + time.Minute,
	})
	if err != nil {
		panic(err)
	}
	pub, err := natsjs.New(ctx, js, "ORDERS", &natsjs.Config{MinDuplicateWindow: natsjs.RetryHorizon(&dcfg)})
	if err != nil {
		panic(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the business change, in tx ...
		return out.Put(ctx, tx, outbox.Message{ID: "order.placed/o-1", Topic: "order.placed", OrderingKey: "o-1", Payload: []byte(`{"order":"o-1"}`)})
	})
	if err != nil {
		panic(err)
	}
	d, err := outbox.NewDispatcher(out, pub, &dcfg)
	if err != nil {
		panic(err)
	}
	n, err := d.DispatchOnce(ctx) // Run(ctx) in a worker
	fmt.Println("dispatched:", n, err)

	// As a dispatcher that died before recording the delivery would, after its lease.
	err = pub.Publish(ctx, outbox.Delivery{Message: outbox.Message{ID: "order.placed/o-1", Topic: "order.placed"}, Attempt: 2})
	fmt.Println("published again:", err)

	stream, _ := js.Stream(ctx, "ORDERS")
	info, _ := stream.Info(ctx)
	m, _ := stream.GetMsg(ctx, 1)
	fmt.Println("messages in the stream:", info.State.Msgs)
	fmt.Println(m.Subject, m.Header.Get("Nats-Msg-Id"), m.Header.Get("Tempotent-Ordering-Key"), string(m.Data))
	// Output:
	// dispatched: 1 <nil>
	// published again: <nil>
	// messages in the stream: 1
	// order.placed order.placed/o-1 o-1 {"order":"o-1"}
}

// New refuses a stream whose Duplicates window is shorter than the dispatcher's retry horizon:
// JetStream's default window, two minutes, is shorter than the dispatcher's defaults need.
func ExampleNew() {
	ctx := context.Background()
	js, stop := exampleServer()
	defer stop()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"event.>"}}); err != nil {
		panic(err)
	}
	_, err := natsjs.New(ctx, js, "EVENTS", nil)
	var short *natsjs.WindowError
	if errors.As(err, &short) {
		fmt.Println("window", short.Window, "below", short.Min)
	}
	_, err = natsjs.New(ctx, js, "NOPE", nil)
	var missing *natsjs.StreamError
	fmt.Println(errors.As(err, &missing), missing.Stream)
	// Output:
	// window 2m0s below 5m31s
	// true NOPE
}
