package activity_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// A heartbeat — ForEach's own after each item, or one in an item — extends the batch's lease and
// the lease of every item running.
func TestForEachHeartbeatsExtendItemLeases(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newWorkflowEnv(t)
	env.SetTestTimeout(30 * time.Second)
	db := pgtest.Pool(t) // the activity runs on the SDK's goroutine, where t must not fail
	var (
		mu                    sync.Mutex // the items run at once: the least each lease had left, over both
		itemLease, batchLease time.Duration
		recorded              bool
	)
	leaseLeft := func(ctx context.Context, idPrefix string) (time.Duration, error) {
		var us int64
		err := db.QueryRow(ctx, "SELECT min((extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint) FROM "+schema+
			".receipts WHERE state = 'pending' AND id LIKE $1", idPrefix+"%").Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	}
	slow := func(ctx context.Context, payee Payee) (Transfer, error) {
		// Heartbeat for three heartbeat timeouts: without extension both leases would end.
		for range 15 {
			sdkactivity.RecordHeartbeat(ctx, payee.ID)
			time.Sleep(200 * time.Millisecond)
		}
		item, err := leaseLeft(ctx, "item:")
		var batch time.Duration
		if err == nil {
			batch, err = leaseLeft(ctx, "wf:")
		}
		mu.Lock()
		if !recorded {
			itemLease, batchLease, recorded = item, batch, true
		}
		itemLease, batchLease = min(itemLease, item), min(batchLease, batch)
		mu.Unlock()
		return Transfer{Payee: payee.ID}, err
	}
	require.NoError(t, activity.Register(env, s, "PayOut", func(ctx context.Context, payees []Payee) (int, error) {
		results, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer", Concurrency: 2}, slow)
		return len(results), err
	}, activity.Options{Batch: true}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second})
		return workflow.ExecuteActivity(ctx, "PayOut", payeesN(2)).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "PayOutWorkflow"})
	env.ExecuteWorkflow("PayOutWorkflow")
	require.NoError(t, env.GetWorkflowError())
	require.Greater(t, itemLease, time.Duration(0), "an item's lease ended while it was heartbeating")
	require.Greater(t, batchLease, time.Duration(0), "the batch's lease ended while an item was heartbeating")
}

// requireErrType requires err to be a retryable application error of type errType: what a
// workflow sees of an activity's error.

// ForEach heartbeats after each item, with its progress as details: a batch activity with a
// heartbeat timeout needs no heartbeat of its own.
func TestForEachHeartbeatsItsProgress(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	env := newActivityEnv("payout", "progress")
	heartbeats := recordProgress(env)
	env.RegisterActivityWithOptions(payOut(s, p, 1), sdkactivity.RegisterOptions{Name: "PayOut"})
	_, err := executePayOut(t, env, payeesN(5))
	require.NoError(t, err)
	seen := heartbeats()
	require.NotEmpty(t, seen, "ForEach did not heartbeat")
	// The SDK sends the first heartbeat at once and throttles the rest.
	require.Equal(t, activity.Progress{Settled: 1, Total: 5}, seen[0])
}

// Progress counts as settled only the items with a final outcome: a batch whose items all failed
// with retryable errors has settled none, and a declined item is settled, and failed.
func TestForEachProgressCountsOnlySettledItems(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	// firstProgress runs a batch of 3 payees through pay and returns its first heartbeat: the
	// SDK sends the first at once and throttles the rest.
	firstProgress := func(t *testing.T, id string, pay func(context.Context, Payee) (int, error)) activity.Progress {
		t.Helper()
		env := newActivityEnv("payout", id)
		heartbeats := recordProgress(env)
		env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) error {
			_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, pay)
			return err
		}, sdkactivity.RegisterOptions{Name: "PayOut"})
		_, _ = env.ExecuteActivity("PayOut", payeesN(3))
		seen := heartbeats()
		require.NotEmpty(t, seen, "ForEach did not heartbeat")
		return seen[0]
	}
	t.Run("AllFailed", func(t *testing.T) {
		progress := firstProgress(t, "all-failed", func(context.Context, Payee) (int, error) {
			return 0, errors.New("gateway unavailable") // retryable: left to the retry
		})
		require.Equal(t, activity.Progress{Settled: 0, Failed: 0, Total: 3}, progress, "a retryable failure counted as settled or failed")
	})
	t.Run("Declined", func(t *testing.T) {
		progress := firstProgress(t, "declined", func(context.Context, Payee) (int, error) {
			return 0, temporal.NewNonRetryableApplicationError("card declined", "Declined", nil) // final
		})
		require.Equal(t, activity.Progress{Settled: 1, Failed: 1, Total: 3}, progress, "a decline is settled and failed")
	})
}

// recordProgress records the Progress of every heartbeat env's activity sends, and returns
// what it recorded so far.
func recordProgress(env *testsuite.TestActivityEnvironment) func() []activity.Progress {
	var (
		mu   sync.Mutex
		seen []activity.Progress
	)
	env.SetOnActivityHeartbeatListener(func(_ *sdkactivity.Info, details converter.EncodedValues) {
		var progress activity.Progress
		if details.Get(&progress) == nil {
			mu.Lock()
			seen = append(seen, progress)
			mu.Unlock()
		}
	})
	return func() []activity.Progress {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
