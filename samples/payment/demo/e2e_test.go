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
// real Postgres, fakepay processes and a worker process that is SIGKILLed once, between a
// message's publish and its mark. It fails if any order has two charges, a compensated order's
// charge was not refunded, a receipt is left pending, a message was processed twice or lost, no
// redelivery reached a consumer's inbox, or the charge ledger holds a status that is not the
// provider's.
func TestEndToEnd(t *testing.T) {
	cli, err := filepath.Abs("../../../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	var out strings.Builder
	sum, err := demo.Run(context.Background(), demo.Options{
		Orders: 10,
		Payees: 100,
		Mix: demo.Mix{Declines: 0.1, ProviderErrors: 0.2, LostResponses: 0.1, CarrierRefusals: 0.1, AsyncCharges: 0.1, WorkerRestarts: 1,
			WebhookFaults: "webhook_duplicate=1,webhook_fail=1"},
		Seed:  7,
		Setup: worker.Config{DatabaseURL: pgtest.URL(), TemporalCLI: cli, LogLevel: "error"},
		Dir:   t.TempDir(),
		Out:   &out,
	})
	t.Log(out.String())
	require.NoError(t, err)
	require.Zero(t, sum.DuplicateCharges, "duplicate charges")
	require.Zero(t, sum.MissedRefunds, "missed refunds")
	require.Zero(t, sum.StuckReceipts, "stuck receipts")
	require.Zero(t, sum.Unresolved, "unresolved sagas")
	require.Equal(t, 100, sum.Payees)
	require.Zero(t, sum.PayeesPaidTwice, "payees paid twice")
	require.Zero(t, sum.PayeesUnpaid, "payees unpaid")
	require.Contains(t, out.String(), "go run ./cmd/tempotent", "the summary does not name the operator's command")
	require.Equal(t, 1, sum.WorkerRestarts)
	// One decline and one refused address: two compensations, one refund (the refused order's
	// charge); the other eight orders complete, each charged once, one of them confirmed by
	// webhook.
	require.Equal(t, 2, sum.Compensated)
	require.Equal(t, 8, sum.Completed)
	require.Equal(t, 9, sum.Charges)
	require.Equal(t, 1, sum.Refunds)
	m := sum.Messages
	require.Zero(t, m.ProcessedTwice, "events processed twice")
	require.Zero(t, m.Lost, "events lost")
	// The first worker was killed after the notifier committed a message and before the
	// dispatcher marked it: the next one delivered it again, and the inbox absorbed it.
	require.Positive(t, m.NotifierDups, "the notifier absorbed no redelivery, so the kill between publish and mark proved nothing")
	require.GreaterOrEqual(t, m.ConsumerDups, m.NotifierDups)
	// The charge ledger kept each charge's status from the provider's events, whatever their
	// order (inbox.Inbox.Newer).
	require.Zero(t, m.ChargeStatusWrong, "charges whose status in the ledger is not the provider's")
	require.Equal(t, sum.Charges, m.ChargesKept, "charges missing from the charge ledger")
	require.Equal(t, 1, m.AsyncSettled, "the charge answered processing was not confirmed to its workflow")
	require.Equal(t, m.WebhookEvents, m.WebhooksStored, "every provider event stored once")
	require.Greater(t, m.WebhookDeliveries, m.WebhookEvents, "no webhook was delivered twice, so the intake's deduplication went untested")
	// Nine reservations (every order but the declined one) and one release (the refused address).
	require.Equal(t, 10, m.OutboxMessages)
	require.Equal(t, 10, m.OutboxDelivered)
	require.Equal(t, 10, m.ProcessedOnce)
}
