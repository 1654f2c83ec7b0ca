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
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/samples/payment"
	"github.com/tempotent/tempotent/worker"
)

func main() {
	var cfg worker.Config
	cfg.Bind(flag.CommandLine)
	paymentsURL := flag.String("payments-url", os.Getenv("FAKEPAY_URL"), "payment provider (fakepay API); empty starts one in this process (env FAKEPAY_URL)")
	carrierURL := flag.String("carrier-url", os.Getenv("CARRIER_URL"), "shipping carrier (fakepay API); empty starts one in this process (env CARRIER_URL)")
	lookupURL := flag.String("lookup-url", os.Getenv("LOOKUP_URL"), "where LegacyCharge's reconcile looks charges up (fakepay API); empty uses the payment provider (env LOOKUP_URL)")
	flag.Parse()
	if cfg.TaskQueue == worker.TaskQueueDefault {
		cfg.TaskQueue = payment.TaskQueue
	}
	if err := run(cfg, *paymentsURL, *carrierURL, *lookupURL); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(cfg worker.Config, paymentsURL, carrierURL, lookupURL string) error {
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
	for _, p := range []*string{&paymentsURL, &carrierURL} {
		if *p == "" {
			srv, err := fakepay.New(nil)
			if err != nil {
				return err
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			*p = hs.URL
		}
	}
	env.Log.Info("downstreams", "payments", paymentsURL, "carrier", carrierURL, "lookup", lookupURL)
	if env.TemporalUI != "" {
		fmt.Fprintf(os.Stderr, "\nTemporal Web UI: %s\n\n", env.TemporalUI)
	}
	a := payment.NewActivities(paymentsURL, carrierURL, lookupURL)
	w := env.NewWorker()
	if err := payment.Register(w, a, env.Store); err != nil {
		return err
	}
	return env.Run(ctx, w)
}
