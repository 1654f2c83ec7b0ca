// Command demo runs the payment sample end to end and prints what happened: see package
// samples/payment/demo. make demo runs it.
//
//	go run ./samples/payment/cmd/demo -orders 50
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/tempotent/tempotent/samples/payment/demo"
	"github.com/tempotent/tempotent/worker"
)

func main() {
	var cfg worker.Config
	cfg.Bind(flag.CommandLine)
	orders := flag.Int("orders", 50, "number of orders")
	restarts := flag.Int("restarts", demo.MixDefault.WorkerRestarts, "times the worker is SIGKILLed and restarted during the run")
	seed := flag.Uint64("seed", 1, "seed of the order mix")
	flag.Parse()
	mix := demo.MixDefault
	mix.WorkerRestarts = *restarts
	if cfg.LogLevel == "info" {
		cfg.LogLevel = "warn"
	}
	sum, err := demo.Run(context.Background(), demo.Options{Orders: *orders, Mix: mix, Seed: *seed, Setup: cfg})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if !sum.OK() {
		fmt.Fprintln(os.Stderr, "demo: an invariant failed (see the table)")
		os.Exit(1)
	}
}
