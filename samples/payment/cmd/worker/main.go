// Command worker runs a tempotent worker with the payment sample: it validates its
// configuration, connects to (or starts) Temporal and Postgres, installs tempotent's
// interceptor and serves the sample's workflow and activities until SIGINT or SIGTERM.
//
//	go run ./samples/payment/cmd/worker -migrate   # everything local: dev server, Postgres, fakepay
//	TEMPORAL_ADDRESS=temporal:7233 DATABASE_URL=postgres://… FAKEPAY_URL=http://… go run ./samples/payment/cmd/worker
//
// Its start-up is the package worker, which your own worker can reuse.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/samples/payment"
	"github.com/tempotent/tempotent/worker"
)

func main() {
	var cfg worker.Config
	cfg.Bind(flag.CommandLine)
	paymentsURL := flag.String("payments-url", os.Getenv("FAKEPAY_URL"), "payment provider (fakepay API); empty starts one in this process (env FAKEPAY_URL)")
	carrierURL := flag.String("carrier-url", os.Getenv("CARRIER_URL"), "shipping carrier (fakepay API); empty starts one in this process (env CARRIER_URL)")
	lookupURL := flag.String("lookup-url", os.Getenv("LOOKUP_URL"), "where LegacyCharge's reconcile looks charges up (fakepay API); empty uses the payment provider (env LOOKUP_URL)")
	httpAddr := flag.String("http-addr", cmp.Or(os.Getenv("TEMPOTENT_HTTP_ADDR"), "127.0.0.1:0"), "where the provider's webhooks, the shipment notifier and the charge ledger are served (env TEMPOTENT_HTTP_ADDR)")
	lease := outbox.LeaseDefault
	if v := os.Getenv("TEMPOTENT_OUTBOX_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker: TEMPOTENT_OUTBOX_LEASE=%q is not a duration (e.g. 30s)\n", v)
			os.Exit(2)
		}
		lease = d
	}
	flag.DurationVar(&lease, "outbox-lease", lease, "how long a dispatcher's claim keeps others off a message (env TEMPOTENT_OUTBOX_LEASE)")
	secret := flag.String("webhook-secret", cmp.Or(os.Getenv("FAKEPAY_WEBHOOK_SECRET"), SecretDefault), "the provider's webhook signing secret (env FAKEPAY_WEBHOOK_SECRET)")
	flag.Parse()
	if cfg.TaskQueue == worker.TaskQueueDefault {
		cfg.TaskQueue = payment.TaskQueue
	}
	if err := run(cfg, *paymentsURL, *carrierURL, *lookupURL, *httpAddr, *secret, lease); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// SecretDefault is the webhook secret of a local run: the in-process fakepay signs with it.
const SecretDefault = "whsec_tempotent_sample"

func run(cfg worker.Config, paymentsURL, carrierURL, lookupURL, httpAddr, secret string, lease time.Duration) error {
	ctx := context.Background()
	env, err := worker.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	if env.Config.Migrate {
		if err := payment.Migrate(ctx, env.Pool); err != nil {
			return err
		}
	}

	// The provider's webhooks, the shipment notifier and the charge ledger, and the dispatchers
	// that deliver the outbox's messages: webhook events to the ledger and their workflows,
	// reservations to the notifier.
	edge, err := payment.Edge(env.Pool, env.Outbox, secret)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("-http-addr %s: %w", httpAddr, err)
	}
	hs := &http.Server{Handler: edge, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	edgeURL := "http://" + ln.Addr().String()
	events, reservations := payment.Publishers(env.Client, edgeURL)
	if err := errors.Join(
		env.Dispatch(events, &outbox.DispatcherConfig{Topics: []string{"webhook." + payment.WebhookSource}, Lease: lease}),
		env.Dispatch(reservations, &outbox.DispatcherConfig{Topics: []string{payment.TopicReserved, payment.TopicReleased}, Lease: lease}),
	); err != nil {
		return err
	}

	// Local providers when none is given; only the payment provider sends webhooks.
	for _, p := range []struct {
		url      *string
		webhooks fakepay.WebhookConfig
	}{
		{&paymentsURL, fakepay.WebhookConfig{URL: edgeURL + payment.PathWebhooks, Secret: secret}},
		{&carrierURL, fakepay.WebhookConfig{}},
	} {
		if *p.url == "" {
			srv, err := fakepay.New(&fakepay.Config{Webhooks: p.webhooks})
			if err != nil {
				return err
			}
			defer srv.Close()
			fs := httptest.NewServer(srv)
			defer fs.Close()
			*p.url = fs.URL
		}
	}
	env.Log.Info("downstreams", "payments", paymentsURL, "carrier", carrierURL, "lookup", lookupURL, "webhooks and notifier", edgeURL)
	if env.TemporalUI != "" {
		fmt.Fprintf(os.Stderr, "\nTemporal Web UI: %s\n\n", env.TemporalUI)
	}
	a := payment.NewActivities(env.Outbox, paymentsURL, carrierURL, lookupURL)
	w := env.NewWorker()
	if err := payment.Register(w, a, env.Store); err != nil {
		return err
	}
	return env.Run(ctx, w)
}
