package activity_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

type Decline struct {
	Code   string `json:"code"`
	Advice string `json:"advice"`
}

func declined() error {
	return temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", errors.New("issuer said no"),
		Decline{Code: "insufficient_funds", Advice: "try another card"})
}

// A replayed failure is the failure first recorded: its type, message, details and cause.
func TestReplayedFailureKeepsItsDetails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, nil)
	c := call(t, "order-1/charge", map[string]int{"amount": 100})
	var calls int
	fn := func(context.Context) (int, error) { calls++; return 0, declined() }
	for i := range 2 {
		_, err := activity.Do(ctx, s, c, fn)
		appErr := temporaltest.RequireAppError(t, err, "CardDeclined", false, "attempt %d", i)
		require.Equal(t, "card declined", appErr.Message())
		var d Decline
		require.NoError(t, appErr.Details(&d), "attempt %d: the details are gone", i)
		require.Equal(t, Decline{Code: "insufficient_funds", Advice: "try another card"}, d)
		require.ErrorContains(t, errors.Unwrap(appErr), "issuer said no", "attempt %d: the cause is gone", i)
	}
	require.Equal(t, 1, calls)
}

// A client with a payload codec (encryption): the receipt stores the payload converter's output
// sealed with Config.Codecs, and what it replays is encoded by the SDK once, so the workflow
// reads the same result and the same failure details on the first execution and on a replay.
func TestPayloadCodecOnTheClient(t *testing.T) {
	t.Parallel()
	codec := receipttest.Rot13Codec{}
	_, err := activity.NewStore(pgtest.Pool(t), &activity.Config{DataConverter: converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), codec)})
	require.ErrorContains(t, err, "Config.Codecs", "a codec data converter would encode stored payloads twice")

	s, schema := setup(t, &activity.Config{Codecs: []converter.PayloadCodec{codec}})
	run := func(name string, fn func(context.Context, ChargeRequest) (Charge, error)) (Charge, error) {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestWorkflowEnvironment()
		env.SetDataConverter(converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), codec))
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
		if err := activity.Register(env, s, name, fn, activity.Options{DownstreamDeduplicates: true}); err != nil {
			return Charge{}, err
		}
		env.RegisterWorkflowWithOptions(func(ctx workflow.Context, req ChargeRequest) (Charge, error) {
			var c Charge
			err := workflow.ExecuteActivity(keys.WithStep(chargeOptions(ctx), name), name, req).Get(ctx, &c)
			return c, err
		}, workflow.RegisterOptions{Name: "Pay"})
		env.ExecuteWorkflow("Pay", ChargeRequest{Order: "order-1", Amount: 100})
		var c Charge
		if err := env.GetWorkflowError(); err != nil {
			return c, err
		}
		return c, env.GetWorkflowResult(&c)
	}

	p := newProvider()
	first, err := run("Charge", p.charge)
	require.NoError(t, err)
	// The test environment gives every run the same IDs: the same intent again, replayed.
	again, err := run("Charge", p.charge)
	require.NoError(t, err)
	require.Equal(t, first, again)
	calls, _ := p.counts()
	require.Equal(t, 1, calls)

	var stored []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT result FROM "+schema+".receipts").Scan(&stored))
	require.False(t, bytes.Contains(stored, []byte(first.Token)), "the stored result is not sealed by Config.Codecs")

	decline := func(context.Context, ChargeRequest) (Charge, error) { return Charge{}, declined() }
	for i := range 2 {
		_, err := run("Decline", decline)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.Equal(t, "CardDeclined", appErr.Type())
		var d Decline
		require.NoError(t, appErr.Details(&d), "run %d", i)
		require.Equal(t, "insufficient_funds", d.Code)
	}
}
