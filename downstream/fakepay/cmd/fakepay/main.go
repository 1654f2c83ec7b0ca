// Command fakepay runs the fake payment provider as its own process, so that tests and the
// demo can kill workers while the provider keeps its ledger.
//
//	go run ./downstream/fakepay/cmd/fakepay -addr 127.0.0.1:8420 -state .tmp/fakepay.json
//	curl -s 127.0.0.1:8420/ledger
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
	faults := flag.String("faults", "", `faults for every request, e.g. "fail_500=1,slow=100ms" (see fakepay.ParseFaults)`)
	flag.Parse()
	if err := run(*addr, *statePath, *retention, *faults); err != nil {
		fmt.Fprintln(os.Stderr, "fakepay:", err)
		os.Exit(1)
	}
}

func run(addr, statePath string, retention time.Duration, faultSpec string) error {
	f, err := fakepay.ParseFaults(faultSpec)
	if err != nil {
		return fmt.Errorf("-faults: %w", err)
	}
	srv, err := fakepay.New(&fakepay.Config{StatePath: statePath, Retention: retention, Faults: f})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-addr %s: %w", addr, err)
	}
	slog.Info("fakepay listening", "addr", "http://"+ln.Addr().String(), "state", statePath, "ledger", "http://"+ln.Addr().String()+"/ledger")

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
