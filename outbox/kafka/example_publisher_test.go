package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/kafka"
)

// A dispatcher produces the outbox's messages to Kafka, keyed by ordering key, each with its
// message ID in a header; the consumer deduplicates on that header through an inbox, so the
// second record a dispatcher crash can leave (here, the same record handed over twice) is
// acknowledged without running again. The cluster is kfake, Kafka's wire protocol in process;
// the database is the real Postgres of TEST_DATABASE_URL.
func ExamplePublisher() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool(ctx, "example_kafka_publisher")
	defer cleanup()
	if err := migrate.Up(ctx, pool, "example_kafka_publisher"); err != nil {
		panic(err)
	}
	cluster, err := kfake.NewCluster(kfake.SeedTopics(3, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	// The producer: franz-go's defaults (acks from all in-sync replicas, idempotent writes)
	// are what New requires.
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	pub, err := kafka.New(producer, &kafka.Config{Topics: map[string]string{"order.placed": "orders"}})
	if err != nil {
		panic(err)
	}

	// The business transaction puts the messages; the dispatcher delivers what committed.
	out, err := outbox.New(pool, &outbox.Config{Schema: "example_kafka_publisher"})
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, event := range []string{"placed", "paid"} {
			err := out.Put(ctx, tx, outbox.Message{
				ID: "order-7/" + event, Topic: "order.placed", OrderingKey: "order-7", Payload: []byte(event),
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	d, err := outbox.NewDispatcher(out, pub, nil)
	if err != nil {
		panic(err)
	}
	for { // the second message of order-7 waits for the first to be delivered
		n, err := d.DispatchOnce(ctx)
		if err != nil {
			panic(err)
		}
		if n == 0 {
			break
		}
	}

	// The consumer.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	in, err := inbox.New(pool, inbox.Config{Consumer: "shipping", Schema: "example_kafka_publisher"})
	if err != nil {
		panic(err)
	}
	var records []*kgo.Record
	for len(records) < 2 {
		pollCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		records = append(records, consumer.PollFetches(pollCtx).Records()...)
		cancel()
	}
	for _, r := range append(records, records[0]) { // records[0] again, as after a dispatcher crash
		ran, err := in.Process(ctx, inbox.Message{ID: kafka.MessageID(r), Payload: r.Value},
			func(ctx context.Context, tx pgx.Tx) error {
				return nil // the consumer's own writes, in tx
			})
		fmt.Printf("key %s, id %s, value %s: processed %v, err %v\n", r.Key, kafka.MessageID(r), r.Value, ran, err)
	}
	// Output:
	// key order-7, id order-7/placed, value placed: processed true, err <nil>
	// key order-7, id order-7/paid, value paid: processed true, err <nil>
	// key order-7, id order-7/placed, value placed: processed false, err <nil>
}
