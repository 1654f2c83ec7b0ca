package demo_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/samples/payment/demo"
	"github.com/tempotent/tempotent/worker"
)

// TestEndToEnd runs the demo's path with a few orders against the real Temporal dev server, the
// real Postgres, fakepay processes and a worker process that is SIGKILLed once mid-run. It
// fails if any order has two charges, a compensated order's charge was not refunded, or a
// receipt is left pending.
func TestEndToEnd(t *testing.T) {
	cli, err := filepath.Abs("../../../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	var out strings.Builder
	sum, err := demo.Run(context.Background(), demo.Options{
		Orders: 8,
		Mix:    demo.Mix{Declines: 0.125, ProviderErrors: 0.25, LostResponses: 0.125, CarrierRefusals: 0.125, WorkerRestarts: 1},
		Seed:   7,
		Setup:  worker.Config{DatabaseURL: pgtest.URL(), TemporalCLI: cli, LogLevel: "error"},
		Dir:    t.TempDir(),
		Out:    &out,
	})
	t.Log(out.String())
	require.NoError(t, err)
	require.Zero(t, sum.DuplicateCharges, "duplicate charges")
	require.Zero(t, sum.MissedRefunds, "missed refunds")
	require.Zero(t, sum.StuckReceipts, "stuck receipts")
	require.Zero(t, sum.Unresolved, "unresolved sagas")
	require.Equal(t, 1, sum.WorkerRestarts)
	// One decline and one refused address: two compensations, one refund (the refused order's
	// charge); the other six orders complete, each charged once.
	require.Equal(t, 2, sum.Compensated)
	require.Equal(t, 6, sum.Completed)
	require.Equal(t, 7, sum.Charges)
	require.Equal(t, 1, sum.Refunds)
}
