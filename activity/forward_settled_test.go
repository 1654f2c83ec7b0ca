package activity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
)

// forwardSettled runs a compensation of forward, registered under a receipt of s with the
// downstream settle time settle, and returns what ForwardSettled told it.
func forwardSettled(t *testing.T, s *activity.Store, forward keys.Key, settle time.Duration) error {
	t.Helper()
	env := newWorkflowEnv(t)
	env.SetHeader(tenantHeader(t, forward.Tenant))
	var answer error
	require.NoError(t, activity.Register(env, s, "Refund", func(ctx context.Context, _ struct{}) (struct{}, error) {
		answer = activity.ForwardSettled(ctx)
		return struct{}{}, nil
	}, activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: settle}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx, _, err := keys.WithCompensation(ctx, forward, "Refund")
		if err != nil {
			return err
		}
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		return workflow.ExecuteActivity(ctx, "Refund", struct{}{}).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "RefundWorkflow"})
	env.ExecuteWorkflow("RefundWorkflow")
	require.NoError(t, env.GetWorkflowError())
	return answer
}

// forwardCall is the call of a forward step in the namespace of Temporal's test environment,
// where the compensation runs.
func forwardCall(t *testing.T, id string) activity.Call {
	t.Helper()
	c := call(t, id, map[string]int{"amount": 100})
	c.Key.Namespace = "default-test-namespace"
	return c
}

// completedForward records a completed forward step id in s and returns its key.
func completedForward(t *testing.T, s *activity.Store, id string) keys.Key {
	t.Helper()
	c := forwardCall(t, id)
	_, err := activity.Do(context.Background(), s, c, func(context.Context) (string, error) { return "ch_" + id, nil })
	require.NoError(t, err)
	return c.Key
}

// requireUnsettled checks that ForwardSettled answered "not final yet", to retry after a delay
// in (lo, hi].
func requireUnsettled(t *testing.T, err error, lo, hi time.Duration) {
	t.Helper()
	var unsettled *activity.ForwardUnsettledError
	require.ErrorAs(t, err, &unsettled)
	require.Greater(t, unsettled.RetryAfter, lo, "retry sooner than the settle time left")
	require.LessOrEqual(t, unsettled.RetryAfter, hi, "retry later than the settle time left")
}

// ForwardSettled's answer for each state of the forward step's receipt: "nothing to undo" is
// final only once the settle time has passed since the last moment the forward effect could have
// happened (its receipt completed or failed, or its last attempt's lease ended), and until then
// the compensation is told to retry after the settle time left.
func TestForwardSettledWaitsForTheLastPossibleEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const settle = 2 * time.Second

	t.Run("CompletedJustNow", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		forward := completedForward(t, s, "order-1/charge")
		// A completed receipt says the charge happened, not that the downstream's search shows it.
		requireUnsettled(t, forwardSettled(t, s, forward, settle), settle/4, settle)
	})

	t.Run("FinishedLongerAgoThanTheSettleTime", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		completed := completedForward(t, s, "order-2/charge")
		failed := forwardCall(t, "order-3/charge")
		_, err := activity.Do(ctx, s, failed, func(context.Context) (string, error) {
			return "", temporal.NewNonRetryableApplicationError("card declined", "Declined", nil)
		})
		require.Error(t, err)
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, forwardSettled(t, s, completed, 200*time.Millisecond))
		require.NoError(t, forwardSettled(t, s, failed.Key, 200*time.Millisecond))
	})

	t.Run("Running", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := forwardCall(t, "order-4/charge")
		c.Lease = 3 * time.Second
		resume, done := pausedAttempt(ctx, s, c, "ch_4", nil)
		defer func() { resume(); <-done }()
		// Its request may land up to the settle time after its lease ends.
		requireUnsettled(t, forwardSettled(t, s, c.Key, settle), settle, c.Lease+settle)
	})

	// diedForward leaves forward step id pending in s, its attempt dead after sending its request
	// and its 50 ms lease over for ago, and returns its key.
	diedForward := func(t *testing.T, s *activity.Store, id string, ago time.Duration) keys.Key {
		c := forwardCall(t, id)
		c.Lease = 50 * time.Millisecond
		receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) {})
		time.Sleep(c.Lease + ago)
		return c.Key
	}

	t.Run("AttemptDiedJustNow", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		// No attempt runs, and the dead one's request may still be in flight.
		forward := diedForward(t, s, "order-5/charge", 50*time.Millisecond)
		requireUnsettled(t, forwardSettled(t, s, forward, settle), settle/4, settle)
	})

	t.Run("AttemptDiedLongerAgoThanTheSettleTime", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		forward := diedForward(t, s, "order-6/charge", 300*time.Millisecond)
		require.NoError(t, forwardSettled(t, s, forward, 200*time.Millisecond))
	})
}
