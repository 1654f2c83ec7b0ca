package saga_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/saga"
)

// settleCall is one answer of ForwardSettled, and when it was given.
type settleCall struct {
	at  time.Time
	err error
}

// A charge completes, the next step fails at once, and the refund's search does not show the
// charge yet. "Nothing to undo" is not final until the charge is older than the downstream's
// settle time: a completed forward receipt says the charge happened, not that the provider's
// search already shows it (Stripe's lags its writes).
func TestForwardSettledWaitsTheSettleTimeAfterACompletedForward(t *testing.T) {
	t.Parallel()
	// Long enough that the refund's first question comes within it even on a loaded machine.
	const settle = 5 * time.Second
	h := newHarness(t)
	var (
		mu           sync.Mutex
		chargeReturn time.Time
		calls        []settleCall
	)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	opts := activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: settle}
	require.NoError(t, activity.Register(env, h.store, "Charge", func(ctx context.Context, o order) (string, error) {
		defer func() { mu.Lock(); chargeReturn = time.Now(); mu.Unlock() }()
		return "ch_1", nil
	}, opts))
	require.NoError(t, activity.Register(env, h.store, "Reserve", func(ctx context.Context, o order) (string, error) {
		return "", temporal.NewNonRetryableApplicationError("out of stock", "Declined", nil)
	}, opts))
	// The provider's search never shows the charge in this test: every refund attempt hears
	// "no charge" and asks ForwardSettled whether that is final.
	require.NoError(t, activity.Register(env, h.store, "Refund", func(ctx context.Context, o order) (string, error) {
		err := activity.ForwardSettled(ctx)
		mu.Lock()
		calls = append(calls, settleCall{at: time.Now(), err: err})
		mu.Unlock()
		return "no charge", err
	}, opts))
	env.RegisterActivityWithOptions(func(context.Context, order) error { return nil }, sdkactivity.RegisterOptions{Name: "Release"})
	env.RegisterWorkflow(paymentSaga)
	env.ExecuteWorkflow(paymentSaga, order{ID: "o-settle", Amount: 100, Options: saga.Options{CompensationOptions: roomToSettle}})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, calls)
	var unsettled *activity.ForwardUnsettledError
	require.True(t, errors.As(calls[0].err, &unsettled),
		"ForwardSettled answered %v %v after the charge completed: a search that lags would make the refund record 'no charge' for good",
		calls[0].err, calls[0].at.Sub(chargeReturn))
	// The receipt was completed after the charge function returned, and read before the answer
	// was noted: the settle time left by the database's clock is at least what is left since the
	// return by this process's, and at most the whole settle time.
	remaining := settle - calls[0].at.Sub(chargeReturn)
	require.GreaterOrEqual(t, unsettled.RetryAfter, remaining-time.Millisecond,
		"RetryAfter is shorter than the settle time left since the charge completed")
	require.LessOrEqual(t, unsettled.RetryAfter, settle, "RetryAfter is longer than the settle time")
	last := calls[len(calls)-1]
	require.NoError(t, last.err)
	require.GreaterOrEqual(t, last.at.Sub(chargeReturn), settle, "settled before the settle time had passed since the charge")
	for _, c := range calls[:len(calls)-1] {
		require.ErrorAs(t, c.err, new(*activity.ForwardUnsettledError))
	}
}
