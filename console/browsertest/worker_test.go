package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/internal/receipttest"
)

// workerEnv, when set, makes the test binary a worker process: the JSON of a workerSpec.
const workerEnv = "TEMPOTENT_BROWSERTEST_WORKER"

// workerSpec is what a worker process is told.
type workerSpec struct {
	DatabaseURL, Schema, Temporal, Queue string
	// Freeze makes the charge hang once the provider has charged, so that the test can kill
	// the process between the effect and its receipt.
	Freeze bool
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		if err := runWorker(spec); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startWorker runs the test binary as a worker process, leashed to this one (it dies with it).
func startWorker(s workerSpec) (*proc.Process, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return proc.Start(cmd)
}

// providerCharges is the payment provider's ledger, a table in the test's schema: the provider
// charges once per call, with no idempotency key, so an attempt that dies after its call leaves
// an outcome nobody knows.
func providerCharges(schema string) string {
	return pgx.Identifier{schema, "provider_charges"}.Sanitize()
}

// runWorker serves the Order workflow and its LegacyCharge activity, under tempotent's
// interceptor and a store sealed with a codec, until SIGTERM or SIGKILL.
func runWorker(spec string) error {
	var s workerSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := activity.NewStore(pool, &activity.Config{Schema: s.Schema, Codecs: []converter.PayloadCodec{receipttest.Rot13Codec{}}})
	if err != nil {
		return err
	}
	c, err := client.Dial(client.Options{HostPort: s.Temporal})
	if err != nil {
		return err
	}
	defer c.Close()
	w := worker.New(c, s.Queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	w.RegisterWorkflowWithOptions(orderWorkflow, workflow.RegisterOptions{Name: "Order"})
	charge := func(ctx context.Context, amount int) (chargeResult, error) {
		var id int64
		if err := pool.QueryRow(ctx, "INSERT INTO "+providerCharges(s.Schema)+" (amount) VALUES ($1) RETURNING id", amount).Scan(&id); err != nil {
			return chargeResult{}, err
		}
		if s.Freeze {
			select {} // the provider charged; the test kills this process before the receipt
		}
		return chargeResult{ChargeID: fmt.Sprintf("ch_%d", id)}, nil
	}
	if err := activity.Register(w, store, "LegacyCharge", charge, activity.Options{}); err != nil {
		return err
	}
	return w.Run(worker.InterruptCh())
}

// orderWorkflow charges, and hands an unknown outcome to its own retry policy: each retried
// run (the same keys) replays the receipt, the unknown outcome until an operator resolves it,
// then the resolved result.
func orderWorkflow(ctx workflow.Context, amount int) (chargeResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 5},
	})
	var c chargeResult
	if err := workflow.ExecuteActivity(ctx, "LegacyCharge", amount).Get(ctx, &c); err != nil {
		return chargeResult{}, temporal.NewApplicationError("the charge's outcome is not known yet", "ChargeOutcome", err)
	}
	return c, nil
}
