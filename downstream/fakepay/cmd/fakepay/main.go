// Command fakepay runs the fake payment provider as its own process, so that tests and the
// demo can kill workers while the provider keeps its ledger.
//
//	go run ./downstream/fakepay/cmd/fakepay -addr 127.0.0.1:8420 -state .tmp/fakepay.json
//	curl -s 127.0.0.1:8420/ledger
//
// With -webhook-url it sends signed webhook events there; -faults takes the webhook faults too:
//
//	go run ./downstream/fakepay/cmd/fakepay -webhook-url http://127.0.0.1:8080/webhooks \
//		-webhook-secret whsec_test -faults webhook_duplicate=1,webhook_delay=500ms,webhook_reorder
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tempotent/tempotent/downstream/fakepay"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8420", "address to listen on (host:port; port 0 picks a free one)")
	statePath := flag.String("state", "", "JSON file for the ledger and stored responses (kept across restarts); empty keeps them in memory")
	retention := flag.Duration("retention", fakepay.RetentionDefault, "how long an idempotency key is remembered")
	faults := flag.String("faults", "", `faults for every request and webhook delivery, e.g. "fail_500=1,slow=100ms,webhook_fail=2" (see fakepay.ParseFaults)`)
	var wh fakepay.WebhookConfig
	flag.StringVar(&wh.URL, "webhook-url", "", "URL that receives the webhook events; empty sends none")
	flag.StringVar(&wh.Secret, "webhook-secret", "", "secret that signs the webhook deliveries (Stripe-Signature); required with -webhook-url")
	flag.DurationVar(&wh.AsyncDelay, "async-delay", fakepay.AsyncDelayDefault, "how long a tok_async or tok_asyncDeclined charge stays processing")
	flag.DurationVar(&wh.RetryMin, "webhook-retry-min", fakepay.WebhookRetryMinDefault, "wait after a delivery's first failed attempt; it doubles per attempt")
	flag.DurationVar(&wh.RetryMax, "webhook-retry-max", fakepay.WebhookRetryMaxDefault, "longest wait between attempts of a delivery")
	flag.DurationVar(&wh.MaxAge, "webhook-max-age", fakepay.WebhookMaxAgeDefault, "how long a delivery is retried before it is given up")
	flag.Parse()
	if err := run(*addr, *statePath, *retention, *faults, wh); err != nil {
		fmt.Fprintln(os.Stderr, "fakepay:", err)
		os.Exit(1)
	}
}

func run(addr, statePath string, retention time.Duration, faultSpec string, webhooks fakepay.WebhookConfig) error {
	f, err := fakepay.ParseFaults(faultSpec)
	if err != nil {
		return fmt.Errorf("-faults: %w", err)
	}
	srv, err := fakepay.New(&fakepay.Config{StatePath: statePath, Retention: retention, Faults: f, Webhooks: webhooks})
	if err != nil {
		return err
	}
	defer srv.Close() // after the HTTP server: what is left to send stays in the state file
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-addr %s: %w", addr, err)
	}
	slog.Info("fakepay listening", "addr", "http://"+ln.Addr().String(), "state", statePath, "webhooks", webhooks.URL, "ledger", "http://"+ln.Addr().String()+"/ledger")

	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdown)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
