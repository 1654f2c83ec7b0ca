package saga_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/saga"
)

// A forward step and its compensation whose workers both die after the effect, before they
// report it: Temporal runs each again, and each retry replays its receipt. One charge, one
// refund, counted at a recording downstream (activitytest).
func TestStepsThatCrashBeforeReportAreNotRepeated(t *testing.T) {
	t.Parallel()
	store := activitytest.NewStore(t, nil)
	provider := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	post := func(ctx context.Context, _ struct{}) (string, error) {
		tok, _ := keys.TokenFrom(ctx) // a compensation's own token: it is an intent of its own
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, nil)
		req.Header.Set("Idempotency-Key", tok.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		return resp.Status, resp.Body.Close()
	}
	env := activitytest.NewWorkflowEnv(t)
	for _, name := range []string{"Charge", "Refund"} {
		require.NoError(t, activity.Register(env, store, name, post, activity.Options{DownstreamDeduplicates: true}))
	}
	require.NoError(t, activity.Register(env, store, "Ship", func(context.Context, struct{}) (string, error) {
		return "", temporal.NewNonRetryableApplicationError("no carrier for this address", "Declined", nil)
	}, activity.Options{DownstreamDeduplicates: true}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (saga.State, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 3}})
		s, err := saga.New(ctx, nil)
		if err != nil {
			return saga.State{}, err
		}
		if err := s.Step(ctx, "charge", saga.Compensation{Activity: "Refund", Args: []any{struct{}{}}}, "Charge", struct{}{}).Get(ctx, nil); err != nil {
			return s.State(), err
		}
		if err := s.Step(ctx, "ship", saga.Compensation{Activity: "Refund", Name: "unship", Args: []any{struct{}{}}}, "Ship", struct{}{}).Get(ctx, nil); err != nil {
			err := s.Compensate(ctx)
			return s.State(), err
		}
		return s.State(), nil
	}, workflow.RegisterOptions{Name: "Order"})

	env.CrashBeforeReport("Charge")
	env.CrashBeforeReport("Refund")
	env.ExecuteWorkflow("Order")
	require.NoError(t, env.GetWorkflowError())
	var st saga.State
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, saga.StateCompensated, st.Status)
	require.Equal(t, 1, env.Crashed("Charge"), "the charge's crash did not happen")
	require.Equal(t, 1, env.Crashed("Refund"), "the refund's crash did not happen")
	// The charge, its refund, and the refund of the ship step that never shipped (a no-op at
	// a real provider; an effect of its own key here).
	require.Equal(t, 3, provider.Effects(), "a step that crashed before report had its effect again")
	for _, key := range provider.Keys() {
		require.Equal(t, 1, provider.EffectsFor(key), "key %s", key)
	}
}
