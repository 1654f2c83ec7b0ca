// Command crashdispatch runs one outbox dispatch through a natsjs.Publisher and exits. The crash
// test builds it with the failpoints tag and arms outbox.after-publish=kill, so that it SIGKILLs
// itself after the stream acked the batch and before the outbox records it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/natsjs"
)

func main() {
	natsURL := flag.String("nats", "", "NATS server URL")
	dbURL := flag.String("db", "", "Postgres URL")
	schema := flag.String("schema", "", "the outbox's schema")
	stream := flag.String("stream", "", "the stream")
	lease := flag.Duration("lease", 0, "the dispatcher's lease")
	flag.Parse()
	if err := run(*natsURL, *dbURL, *schema, *stream, *lease); err != nil {
		fmt.Fprintln(os.Stderr, "crashdispatch:", err)
		os.Exit(1)
	}
	fmt.Println("dispatched without crashing")
}

func run(natsURL, dbURL, schema, stream string, lease time.Duration) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	if err != nil {
		return err
	}
	pub, err := natsjs.New(ctx, js, stream, nil)
	if err != nil {
		return err
	}
	d, err := outbox.NewDispatcher(out, pub, &outbox.DispatcherConfig{Name: "crashing", Lease: lease})
	if err != nil {
		return err
	}
	n, err := d.DispatchOnce(ctx)
	fmt.Println("claimed", n)
	return err
}
