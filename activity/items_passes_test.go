package activity_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

func requireErrType(t *testing.T, err error, errType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, errType, appErr.Type(), "%v", err)
	require.False(t, appErr.NonRetryable(), "%v", err)
}

// A panic in an item running beside others is the activity's panic, as the SDK reports it, not
// the end of the worker process.
func TestForEachPanicInAnItemFailsTheActivity(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	env := newActivityEnv("payout", "panics")
	env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) error {
		_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer", Concurrency: 4},
			func(_ context.Context, p Payee) (int, error) {
				if p.ID == "seller-005" {
					panic("bug in the payee code")
				}
				return 1, nil
			})
		return err
	}, sdkactivity.RegisterOptions{Name: "Panics"})
	_, err := env.ExecuteActivity("Panics", payeesN(20))
	var panicErr *temporal.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Contains(t, panicErr.Error(), "bug in the payee code")
}

// Two passes over the same items (pay each seller, then notify each) need a name each: under
// one, the second pass would replay the first pass's receipts instead of running. ForEach refuses
// the name when the passes' types differ; the same pass again under its name is allowed.
func TestForEachOneNameIsOnePass(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	notified := 0
	notify := func(_ context.Context, payee Payee) (string, error) { notified++; return "msg-" + payee.ID, nil }
	twoPasses := func(notifyOp string) func(ctx context.Context, payees []Payee) error {
		return func(ctx context.Context, payees []Payee) error {
			for range 2 { // the same pass twice in one attempt, as a loop over the unfinished would
				if _, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, p.pay); err != nil {
					return err
				}
			}
			_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: notifyOp}, notify)
			return err
		}
	}
	env := newActivityEnv("payout", "passes-one-name")
	env.RegisterActivityWithOptions(twoPasses("Transfer"), sdkactivity.RegisterOptions{Name: "PayAndNotify"})
	_, err := env.ExecuteActivity("PayAndNotify", payeesN(3))
	temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
	require.ErrorContains(t, err, `the pass "Transfer" already ran in this attempt`)
	require.ErrorContains(t, err, "give each pass its own Items.Operation")
	require.NotContains(t, err.Error(), "interceptor")
	require.Zero(t, notified)

	env = newActivityEnv("payout", "passes-named")
	env.RegisterActivityWithOptions(twoPasses("Notify"), sdkactivity.RegisterOptions{Name: "PayAndNotify"})
	_, err = env.ExecuteActivity("PayAndNotify", payeesN(3))
	require.NoError(t, err)
	require.Equal(t, 3, notified, "the notify pass replayed the pay pass's receipts")
}

// An item error whose type the activity's retry policy names as non-retryable is recorded as
// final, as a single activity's is: the item is settled, and the batch is not unfinished. (Else
// the attempt that recorded it would fail the batch, and with MaximumAttempts 1 the activity.)
// The SDK's test environments leave the retry policy out of the activity's info, so this runs on
// the dev server.
func TestForEachRetryPolicyDecidesWhatIsSettled(t *testing.T) { // not parallel: t.Setenv
	s, _ := setup(t, nil)
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	t.Setenv("TEMPORAL_CLI", cli)
	c := activitytest.NewDevServer(t)
	queue := "foreach-policy"
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	w.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) (int, error) {
		results, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, func(_ context.Context, p Payee) (int, error) {
			if p.ID == "seller-001" {
				return 0, temporal.NewApplicationError("account closed", "AccountClosed") // retryable by its own flag
			}
			return 1, nil
		})
		if err != nil {
			return 0, err
		}
		settled := 0
		for _, r := range results {
			if r.Settled() {
				settled++
			}
		}
		return settled, nil
	}, sdkactivity.RegisterOptions{Name: "PayOut"})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) (int, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1, NonRetryableErrorTypes: []string{"AccountClosed"}}})
		var settled int
		err := workflow.ExecuteActivity(ctx, "PayOut", payeesN(3)).Get(ctx, &settled)
		return settled, err
	}, workflow.RegisterOptions{Name: "PayOutWorkflow"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "payout-policy", TaskQueue: queue}, "PayOutWorkflow")
	require.NoError(t, err)
	var settled int
	require.NoError(t, run.Get(ctx, &settled), "an item the retry policy makes final left the batch unfinished")
	require.Equal(t, 3, settled)
}

// Each misuse of ForEach is refused with a message that names what is wrong and what to do. None
// of them is a missing interceptor, so none says to install it; the worker without the
// interceptor still does.
func TestForEachMisuseSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	items := func(o activity.Items[Payee]) func(context.Context, []Payee) error {
		return func(ctx context.Context, payees []Payee) error {
			_, err := activity.ForEach(ctx, s, payees, o, p.pay)
			return err
		}
	}
	run := func(t *testing.T, env *testsuite.TestActivityEnvironment, fn func(context.Context, []Payee) error) error {
		t.Helper()
		env.RegisterActivityWithOptions(fn, sdkactivity.RegisterOptions{Name: "PayOut"})
		_, err := env.ExecuteActivity("PayOut", payeesN(2))
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
		return err
	}
	requireCause := func(t *testing.T, err error, cause string) {
		t.Helper()
		require.ErrorContains(t, err, cause)
		require.NotContains(t, err.Error(), "interceptor", "the message blames the interceptor for another misuse")
	}

	t.Run("OutsideAnActivity", func(t *testing.T) {
		_, err := activity.ForEach(context.Background(), s, payeesN(1), activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, p.pay)
		require.ErrorIs(t, err, activity.ErrMisconfigured)
		requireCause(t, err, "call it inside an activity")
	})
	t.Run("NoID", func(t *testing.T) {
		requireCause(t, run(t, newActivityEnv("payout", "no-id"), items(activity.Items[Payee]{})), "Items.ID is required")
	})
	t.Run("NoOperation", func(t *testing.T) {
		err := run(t, newActivityEnv("payout", "no-operation"), items(activity.Items[Payee]{ID: payeeID}))
		requireCause(t, err, "Items.Operation is required; name the pass")
	})
	t.Run("InvalidOperation", func(t *testing.T) {
		err := run(t, newActivityEnv("payout", "bad-operation"), items(activity.Items[Payee]{ID: payeeID, Operation: "Transfer\n"}))
		requireCause(t, err, `Items.Operation "Transfer\n" is the items' key operation: invalid idempotency key: operation has control character`)
		err = run(t, newActivityEnv("payout", "long-operation"), items(activity.Items[Payee]{ID: payeeID, Operation: strings.Repeat("x", keys.MaxNameLen+1)}))
		requireCause(t, err, "operation is 256 bytes; the limit is 255")
		require.Zero(t, p.requests["seller-000"], "an item ran under an invalid operation")
	})
	t.Run("InvalidOptions", func(t *testing.T) {
		err := run(t, newActivityEnv("payout", "bad-options"),
			items(activity.Items[Payee]{ID: payeeID, Operation: "Transfer", Options: activity.Options{DownstreamKeyMemory: -time.Second}}))
		requireCause(t, err, "Options.DownstreamKeyMemory is negative")
	})
	t.Run("RegisteredWithoutBatch", func(t *testing.T) {
		env := newActivityEnv("payout", "no-batch")
		require.NoError(t, activity.Register(env, s, "PayOut", payOut(s, p, 1), activity.Options{}))
		_, err := env.ExecuteActivity("PayOut", payeesN(1))
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
		requireCause(t, err, "register it with Options{Batch: true}")
	})
	t.Run("WithoutTheInterceptor", func(t *testing.T) {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: keys.Given(context.Background(), "payout", "no-interceptor")})
		err := run(t, env, items(activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}))
		require.ErrorContains(t, err, "install activity.NewInterceptor()", "a plain activity")

		env = suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: keys.Given(context.Background(), "payout", "no-interceptor")})
		require.NoError(t, activity.Register(env, s, "PayOut", payOut(s, p, 1), activity.Options{Batch: true}))
		_, err = env.ExecuteActivity("PayOut", payeesN(1))
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
		require.ErrorContains(t, err, "install activity.NewInterceptor()", "a registered activity")
	})
}

// mailer sends one kind of message to payees, and logs what it sent.
type mailer struct {
	kind string
	mu   *sync.Mutex
	sent map[string]int // "kind/payee" → messages
}

func (m mailer) Send(_ context.Context, p Payee) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent[m.kind+"/"+p.ID]++
	return m.kind + "-" + p.ID, nil
}

// sendAs returns a closure of one function literal for each kind. It is not inlined: inlined at
// two call sites, the literal would compile to two functions.
//
//go:noinline
func sendAs(kind string, mu *sync.Mutex, sent map[string]int) func(context.Context, Payee) (string, error) {
	return func(ctx context.Context, p Payee) (string, error) {
		return mailer{kind: kind, mu: mu, sent: sent}.Send(ctx, p)
	}
}

// A pass over the items is named (Items.Operation), not guessed from its function: two closures
// of one function literal, or two method values of one method, are two passes with one code
// pointer. Unnamed, a pass is refused before anything is sent; named apart, each pass sends to
// every item.
func TestForEachPassesAreNamedNotGuessed(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	type send = func(context.Context, Payee) (string, error)
	var (
		mu   sync.Mutex
		sent = map[string]int{}
	)
	payoutMailer, statementMailer := mailer{kind: "payout", mu: &mu, sent: sent}, mailer{kind: "statement", mu: &mu, sent: sent}
	for _, tc := range []struct {
		name          string
		first, second send
	}{
		{"ClosuresOfOneLiteral", sendAs("payout", &mu, sent), sendAs("statement", &mu, sent)},
		{"MethodValuesOfOneMethod", payoutMailer.Send, statementMailer.Send},
	} {
		t.Run(tc.name, func(t *testing.T) {
			twoPasses := func(first, second string) func(context.Context, []Payee) error {
				return func(ctx context.Context, payees []Payee) error {
					for _, pass := range []struct {
						name string
						fn   send
					}{{first, tc.first}, {second, tc.second}} {
						if _, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: pass.name}, pass.fn); err != nil {
							return err
						}
					}
					return nil
				}
			}
			mu.Lock()
			clear(sent)
			mu.Unlock()
			env := newActivityEnv("mailing", tc.name+"-unnamed")
			env.RegisterActivityWithOptions(twoPasses("", ""), sdkactivity.RegisterOptions{Name: "Mail"})
			_, err := env.ExecuteActivity("Mail", payeesN(2))
			temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
			require.ErrorContains(t, err, "Items.Operation is required")
			mu.Lock()
			require.Empty(t, sent, "a pass without a name ran")
			mu.Unlock()

			env = newActivityEnv("mailing", tc.name+"-named")
			env.RegisterActivityWithOptions(twoPasses("Payout", "Statement"), sdkactivity.RegisterOptions{Name: "Mail"})
			_, err = env.ExecuteActivity("Mail", payeesN(2))
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{"payout/seller-000": 1, "payout/seller-001": 1, "statement/seller-000": 1, "statement/seller-001": 1}, sent,
				"each pass sends to each item once")
		})
	}
}
