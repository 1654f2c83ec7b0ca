package saga_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/saga"
)

// ledger is a fake downstream that deduplicates on the token, like a payment provider, and
// counts every effect it applies. Compensations find the forward effect by the forward token.
type ledger struct {
	mu      sync.Mutex
	applied map[string]map[string]bool // kind → forward token → applied
	undone  map[string]map[string]int  // kind → forward token → undo effects
	order   []string                   // effects in the order they happened
	calls   map[string]int             // activity name → calls that reached the ledger
}

func newLedger() *ledger {
	return &ledger{applied: map[string]map[string]bool{}, undone: map[string]map[string]int{}, calls: map[string]int{}}
}

func (l *ledger) do(ctx context.Context, kind string) (string, error) {
	tok, ok := keys.TokenFrom(ctx)
	if !ok {
		return "", errors.New("no token")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[kind]++
	if l.applied[kind] == nil {
		l.applied[kind] = map[string]bool{}
	}
	if !l.applied[kind][tok.String()] {
		l.applied[kind][tok.String()] = true
		l.order = append(l.order, kind)
	}
	return kind + ":" + tok.String()[:6], nil
}

// undo reverses kind's effect made under the forward token, once; an unknown one is a no-op.
func (l *ledger) undo(ctx context.Context, kind string) error {
	fwd, ok := keys.CompensatesFrom(ctx)
	if !ok {
		return errors.New("compensation without the forward token")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls["undo "+kind]++
	if !l.applied[kind][fwd.String()] {
		// Compensating an effect that never happened is a success, once it is certain that
		// it will not happen: the forward request may still be on its way.
		return activity.ForwardSettled(ctx)
	}
	if l.undone[kind] == nil {
		l.undone[kind] = map[string]int{}
	}
	if l.undone[kind][fwd.String()] == 0 {
		l.order = append(l.order, "undo "+kind)
	}
	l.undone[kind][fwd.String()]++ // counts every undo that reached an applied effect
	return nil
}

func (l *ledger) effects(kind string) (done, undone int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.undone[kind] {
		undone += n
	}
	return len(l.applied[kind]), undone
}

type order struct {
	ID      string `json:"id"`
	Amount  int    `json:"amount"`
	FailAt  string `json:"fail_at,omitempty"` // the forward step that fails for good
	Options saga.Options
}

func paymentSaga(ctx workflow.Context, o order) (saga.State, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 3},
	})
	s, err := saga.New(ctx, &o.Options)
	if err != nil {
		return saga.State{}, err
	}
	steps := []struct{ name, forward, undo string }{
		{"charge", "Charge", "Refund"},
		{"reserve", "Reserve", "Release"},
		{"ship", "Ship", "CancelShipment"},
	}
	for _, st := range steps {
		err := s.Step(ctx, st.name, saga.Compensation{Activity: st.undo, Args: []any{o}}, st.forward, o).Get(ctx, nil)
		if err != nil {
			if cerr := s.Compensate(ctx); cerr != nil {
				return s.State(), cerr
			}
			return s.State(), nil
		}
	}
	s.Complete()
	return s.State(), nil
}

type harness struct {
	t      *testing.T
	store  *activity.Store
	ledger *ledger
	// fail, when set, decides whether a call to an activity fails before its effect, and how.
	fail func(activity string, o order, attempt int32) error
	// after, when set, runs after an activity's effect: a slow worker, a lost response.
	after func(ctx context.Context, activity string)
	// workflow is the saga to run; paymentSaga when nil.
	workflow func(workflow.Context, order) (saga.State, error)
	// tenant, when set, is the tenant the saga is started under.
	tenant string
	// late, when set and true for an activity, has the provider apply its effect later, on
	// its own: the activity does not apply it.
	late func(ctx context.Context, activity string) bool
}

// settleTime is the downstream's settle time in these tests: how long after a forward attempt
// ended its effect may still land.
const settleTime = time.Second

func newHarness(t *testing.T) *harness {
	schema := pgtest.Schema(t)
	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	return &harness{t: t, store: store, ledger: newLedger()}
}

// activityNames maps each activity to the ledger kind it applies or, for compensations, undoes.
var activityNames = map[string]string{
	"Charge": "charge", "Reserve": "reserve", "Ship": "ship",
	"Refund": "undo charge", "Release": "undo reserve", "CancelShipment": "undo ship",
}

func (h *harness) interceptor() interceptor.WorkerInterceptor { return activity.NewInterceptor() }

// register registers the saga's activities on a test environment or a worker.
func (h *harness) register(r worker.ActivityRegistry) {
	for name, kind := range activityNames {
		err := activity.Register(r, h.store, name, func(ctx context.Context, o order) (string, error) {
			if h.fail != nil {
				if err := h.fail(name, o, sdkactivity.GetInfo(ctx).Attempt); err != nil {
					return "", err
				}
			}
			var out string
			var err error
			if undone, ok := strings.CutPrefix(kind, "undo "); ok {
				err = h.ledger.undo(ctx, undone)
			} else if h.late == nil || !h.late(ctx, name) {
				out, err = h.ledger.do(ctx, kind)
			}
			if h.after != nil && err == nil {
				h.after(ctx, name)
				err = ctx.Err()
			}
			return out, err
		}, activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: settleTime})
		require.NoError(h.t, err)
	}
}

// run executes the saga in a fresh test environment, as a new worker would after a crash or a
// Reset: same workflow ID, same OriginalRunID.
func (h *harness) run(o order) (saga.State, error) {
	if o.Options.CompensationOptions.RetryPolicy == nil {
		o.Options.CompensationOptions = roomToSettle
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{h.interceptor()}})
	if h.tenant != "" {
		env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
		header := map[string]*commonpb.Payload{}
		require.NoError(h.t, keys.TenantPropagator().Inject(keys.WithTenant(context.Background(), h.tenant), headerMap(header)))
		env.SetHeader(&commonpb.Header{Fields: header})
	}
	h.register(env)
	wf := h.workflow
	if wf == nil {
		wf = paymentSaga
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf, o)
	require.True(h.t, env.IsWorkflowCompleted())
	if err := env.GetWorkflowError(); err != nil {
		return saga.State{}, err
	}
	var st saga.State
	require.NoError(h.t, env.GetWorkflowResult(&st))
	q, err := env.QueryWorkflow(saga.QueryTypeDefault)
	require.NoError(h.t, err)
	var queried saga.State
	require.NoError(h.t, q.Get(&queried))
	require.Equal(h.t, st, queried, "the query and the workflow disagree")
	return st, nil
}

// roomToSettle are compensation options for the test environment. A compensation that finds
// nothing to undo retries (ForwardUnsettled) until its forward step is settleTime old in real
// time, while the environment skips the retries' mock-time delays and caps "unlimited" retries
// at 10: give them room.
var roomToSettle = workflow.ActivityOptions{
	ScheduleToCloseTimeout: 24 * time.Hour,
	RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 1 << 20},
}

// headerMap is a workflow.HeaderWriter over a header's fields.
type headerMap map[string]*commonpb.Payload

func (h headerMap) Set(name string, p *commonpb.Payload) { h[name] = p }

func declined(activity string) func(string, order, int32) error {
	return func(name string, _ order, _ int32) error {
		if name == activity {
			return temporal.NewNonRetryableApplicationError(activity+" refused", "Declined", nil)
		}
		return nil
	}
}

func TestStepThreeFailsCompensationsRunInReverseOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fail = declined("Ship")
	st, err := h.run(order{ID: "o-1", Amount: 100})
	require.NoError(t, err)
	require.Equal(t, saga.StateCompensated, st.Status)
	require.Equal(t, []string{"charge", "reserve", "undo reserve", "undo charge"}, h.ledger.order)
	for _, kind := range []string{"charge", "reserve"} {
		done, undone := h.ledger.effects(kind)
		require.Equal(t, 1, done, kind)
		require.Equal(t, 1, undone, kind)
	}
	require.Len(t, st.Steps, 3)
	require.Equal(t, saga.OutcomeFailed, st.Steps[2].Outcome)
	for _, s := range st.Steps {
		require.Equal(t, saga.CompensationCompleted, s.CompensationState, s.Name)
	}
}

func TestCompensationFailsTwiceThenSucceeds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	refundAttempts := 0
	h.fail = func(name string, o order, attempt int32) error {
		switch name {
		case "Ship":
			return temporal.NewNonRetryableApplicationError("no carrier", "Declined", nil)
		case "Refund":
			refundAttempts++
			if attempt <= 2 {
				return errors.New("provider answered 503")
			}
		}
		return nil
	}
	st, err := h.run(order{ID: "o-2", Amount: 100})
	require.NoError(t, err)
	require.Equal(t, saga.StateCompensated, st.Status)
	require.Equal(t, 3, refundAttempts)
	_, refunds := h.ledger.effects("charge")
	require.Equal(t, 1, refunds)
}

func TestChargeTakesEffectThenTimesOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// The charge lands at the provider, then every attempt outlives its start-to-close timeout:
	// the workflow never sees a result, and the charge's outcome is unknown to it.
	h.after = func(ctx context.Context, name string) {
		if name == "Charge" {
			<-ctx.Done()
		}
	}
	st, err := h.run(order{ID: "o-3", Amount: 100})
	require.NoError(t, err)
	require.Len(t, st.Steps, 1)
	require.Equal(t, saga.OutcomeUnknown, st.Steps[0].Outcome)
	require.Equal(t, saga.CompensationCompleted, st.Steps[0].CompensationState)
	charges, refunds := h.ledger.effects("charge")
	require.Equal(t, 1, charges)
	require.Equal(t, 1, refunds, "the charge that timed out was not refunded exactly once")
}

func TestReExecutionAsAfterResetHasNoNewEffects(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fail = declined("Ship")
	first, err := h.run(order{ID: "o-4", Amount: 100})
	require.NoError(t, err)
	callsAfterFirst := map[string]int{}
	for k, v := range h.ledger.calls {
		callsAfterFirst[k] = v
	}

	// A fresh worker runs the whole saga again under the same workflow ID and OriginalRunID,
	// as after a Reset to the start: the same keys. The charge, compensated, refuses to replay
	// "charged" (tempotent.Compensated), and the saga compensates again: the refund replays its
	// receipt.
	again, err := h.run(order{ID: "o-4", Amount: 100})
	require.NoError(t, err)
	require.Equal(t, saga.StateCompensated, again.Status)
	require.Len(t, again.Steps, 1, "the saga went on past a step it compensated")
	require.Equal(t, first.Steps[0].Token, again.Steps[0].Token, "the re-run has other keys")
	require.Equal(t, first.Steps[0].CompensationToken, again.Steps[0].CompensationToken, "the re-run has other keys")
	require.Contains(t, again.Steps[0].Error, activity.ErrTypeCompensated)
	require.Equal(t, saga.CompensationCompleted, again.Steps[0].CompensationState)
	require.Equal(t, callsAfterFirst, h.ledger.calls, "a replayed step or compensation reached the provider")
	for _, kind := range []string{"charge", "reserve"} {
		done, undone := h.ledger.effects(kind)
		require.Equal(t, 1, done, kind)
		require.Equal(t, 1, undone, kind)
	}
}

func TestCompensationKeysAreDistinctAndStable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fail = declined("Ship")
	st, err := h.run(order{ID: "o-5", Amount: 100})
	require.NoError(t, err)
	seen := map[string]string{}
	for _, s := range st.Steps {
		for what, tok := range map[string]string{s.Name: s.Token, s.Name + "/" + s.Compensation: s.CompensationToken} {
			require.Len(t, tok, keys.TokenLen)
			other, dup := seen[tok]
			require.False(t, dup, "%s and %s share token %s", what, other, tok)
			seen[tok] = what
		}
	}
	// An independent, identical execution (on another worker, against another store, so that
	// it runs every step rather than meet the compensated ones) derives the same keys.
	h2 := newHarness(t)
	h2.fail = h.fail
	again, err := h2.run(order{ID: "o-5", Amount: 100})
	require.NoError(t, err)
	for i := range st.Steps {
		require.Equal(t, st.Steps[i].Token, again.Steps[i].Token)
		require.Equal(t, st.Steps[i].CompensationToken, again.Steps[i].CompensationToken)
	}
}

// failingUndo makes the named compensations fail for good.
func failingUndo(undo ...string) func(string, order, int32) error {
	return func(name string, _ order, _ int32) error {
		if name == "Ship" {
			return temporal.NewNonRetryableApplicationError("no carrier", "Declined", nil)
		}
		for _, u := range undo {
			if name == u {
				return temporal.NewNonRetryableApplicationError(name+" rejected", "Rejected", nil)
			}
		}
		return nil
	}
}

func TestCompensationFailureModes(t *testing.T) {
	t.Parallel()

	// A cancel-shipment that fails for good neither holds up nor skips the refund: the
	// remaining compensations run in reverse order, and the error names the one that failed.
	t.Run("SequentialRunsTheRestAfterAFailure", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.fail = failingUndo("CancelShipment") // the shipment is declined, and its cancel fails
		_, err := h.run(order{ID: "o-6", Amount: 100})
		require.ErrorContains(t, err, `step "ship": compensation "CancelShipment"`)
		require.ErrorContains(t, err, "CancelShipment rejected")
		require.NotContains(t, err.Error(), "not run:")
		_, refunds := h.ledger.effects("charge")
		require.Equal(t, 1, refunds, "the refund was skipped after the shipment's cancel failed")
		_, releases := h.ledger.effects("reserve")
		require.Equal(t, 1, releases, "the release was skipped after the shipment's cancel failed")
	})

	t.Run("SequentialNamesEveryFailure", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.fail = failingUndo("Release", "CancelShipment")
		_, err := h.run(order{ID: "o-7", Amount: 100})
		require.ErrorContains(t, err, `step "reserve": compensation "Release"`)
		require.ErrorContains(t, err, `step "ship": compensation "CancelShipment"`)
		require.NotContains(t, err.Error(), "not run:")
		_, refunds := h.ledger.effects("charge")
		require.Equal(t, 1, refunds)
	})

	t.Run("ParallelRunsEveryCompensation", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.fail = failingUndo("Release", "CancelShipment")
		_, err := h.run(order{ID: "o-8", Amount: 100, Options: saga.Options{Parallel: true}})
		require.ErrorContains(t, err, `step "reserve"`)
		require.ErrorContains(t, err, `step "ship"`)
		_, refunds := h.ledger.effects("charge")
		require.Equal(t, 1, refunds)
	})

	t.Run("ParallelAllSucceed", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.fail = declined("Ship")
		st, err := h.run(order{ID: "o-9", Amount: 100, Options: saga.Options{Parallel: true}})
		require.NoError(t, err)
		require.Equal(t, saga.StateCompensated, st.Status)
		for _, kind := range []string{"charge", "reserve"} {
			_, undone := h.ledger.effects(kind)
			require.Equal(t, 1, undone, kind)
		}
	})
}

// The typed error, inside the workflow, before it crosses into Temporal.
func TestCompensateReturnsTypedError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	env.RegisterActivityWithOptions(func(ctx context.Context) error { return nil }, sdkactivity.RegisterOptions{Name: "Do"})
	require.NoError(t, activity.Register(env, h.store, "Undo", func(ctx context.Context, _ struct{}) (struct{}, error) {
		return struct{}{}, temporal.NewNonRetryableApplicationError("cannot undo", "Rejected", nil)
	}, activity.Options{DownstreamDeduplicates: true}))
	var got *saga.CompensationError
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		s, err := saga.New(ctx, nil)
		if err != nil {
			return err
		}
		if err := s.Step(ctx, "do", saga.Compensation{Activity: "Undo", Name: "undo", Args: []any{struct{}{}}}, "Do").Get(ctx, nil); err != nil {
			return err
		}
		err = s.Compensate(ctx)
		errors.As(err, &got)
		return nil
	}, workflow.RegisterOptions{Name: "W"})
	env.ExecuteWorkflow("W")
	require.NoError(t, env.GetWorkflowError())
	require.NotNil(t, got)
	require.Len(t, got.Failed, 1)
	require.Equal(t, "do", got.Failed[0].Step)
	require.Equal(t, "undo", got.Failed[0].Compensation)
	require.Contains(t, got.Failed[0].Reason, "cannot undo")
}

func parallelSaga(ctx workflow.Context, o order) (saga.State, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	s, err := saga.New(ctx, &o.Options)
	if err != nil {
		return saga.State{}, err
	}
	charged := s.Step(ctx, "charge", saga.Compensation{Activity: "Refund", Args: []any{o}}, "Charge", o)
	reserved := s.Step(ctx, "reserve", saga.Compensation{Activity: "Release", Args: []any{o}}, "Reserve", o)
	if err := reserved.Get(ctx, nil); err != nil {
		// The charge is still in flight: its compensation must wait for it.
		err := s.Compensate(ctx)
		return s.State(), err
	}
	return s.State(), charged.Get(ctx, nil)
}

func TestCompensationWaitsForItsForwardStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fail = func(name string, _ order, _ int32) error {
		switch name {
		case "Charge":
			time.Sleep(300 * time.Millisecond) // a slow provider
		case "Reserve":
			return temporal.NewNonRetryableApplicationError("out of stock", "Declined", nil)
		}
		return nil
	}
	h.workflow = parallelSaga
	_, err := h.run(order{ID: "o-10", Amount: 100})
	require.NoError(t, err)
	charges, refunds := h.ledger.effects("charge")
	require.Equal(t, 1, charges)
	require.Equal(t, 1, refunds, "the refund overtook the charge it undoes")
}

func loopSaga(ctx workflow.Context, o order) (saga.State, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	s, err := saga.New(ctx, &o.Options)
	if err != nil {
		return saga.State{}, err
	}
	for range 3 { // three instalments: the same step, three intents
		if err := s.Step(ctx, "charge", saga.Compensation{Activity: "Refund", Args: []any{o}}, "Charge", o).Get(ctx, nil); err != nil {
			return saga.State{}, err
		}
	}
	err = s.Compensate(ctx)
	return s.State(), err
}

func TestLoopGetsAKeyPerOccurrence(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.workflow = loopSaga
	st, err := h.run(order{ID: "o-11", Amount: 100})
	require.NoError(t, err)
	require.Len(t, st.Steps, 3)
	tokens := map[string]bool{}
	for _, s := range st.Steps {
		tokens[s.Token] = true
		tokens[s.CompensationToken] = true
	}
	require.Len(t, tokens, 6, "occurrences of one step share a key")
	charges, refunds := h.ledger.effects("charge")
	require.Equal(t, 3, charges)
	require.Equal(t, 3, refunds)
}

// The provider holds the charge request past the forward step's last attempt and applies it a
// moment after the saga began compensating. The refund's "no charge" is not final until the
// forward step has settled: it is retried, finds the charge, and refunds it once.
func TestCompensationWaitsForAForwardStillInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.after = func(ctx context.Context, name string) {
		if name == "Charge" {
			<-ctx.Done()
		}
	}
	// Each charge attempt reaches the provider, which applies it only after the attempt has
	// timed out; the effect of the last one lands after the saga compensates.
	lateCharge := h.ledger.do
	h.late = func(ctx context.Context, name string) bool {
		if name != "Charge" {
			return false
		}
		tok, _ := keys.TokenFrom(ctx)
		go func() {
			<-ctx.Done()
			time.Sleep(settleTime / 3)
			_, _ = lateCharge(keys.WithToken(context.Background(), tok), "charge")
		}()
		return true
	}
	st, err := h.run(order{ID: "o-late", Amount: 100})
	require.NoError(t, err)
	require.Equal(t, saga.OutcomeUnknown, st.Steps[0].Outcome)
	require.Equal(t, saga.CompensationCompleted, st.Steps[0].CompensationState)
	charges, refunds := h.ledger.effects("charge")
	require.Equal(t, 1, charges)
	require.Equal(t, 1, refunds, "the refund concluded 'no charge' while the charge was still on its way")
}

// A saga under a tenant: its steps and compensations carry the tenant in their keys, and each
// compensation finds its forward effect.
func TestSagaUnderATenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.tenant = "acme"
	h.fail = declined("Ship")
	st, err := h.run(order{ID: "o-tenant", Amount: 100})
	require.NoError(t, err)
	require.Equal(t, saga.StateCompensated, st.Status)
	for _, kind := range []string{"charge", "reserve"} {
		done, undone := h.ledger.effects(kind)
		require.Equal(t, 1, done, kind)
		require.Equal(t, 1, undone, "%s: its compensation did not find the forward effect", kind)
	}
	var tenants []string
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT DISTINCT tenant FROM "+h.store.Config().Schema+".receipts")
	require.NoError(t, err)
	for rows.Next() {
		var tenant string
		require.NoError(t, rows.Scan(&tenant))
		tenants = append(tenants, tenant)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"acme"}, tenants)
}

// A step that failed after its effect may have happened shows as unknown, not failed, and is
// compensated: its receipt says the outcome is unknown, or the authorization hook refused it,
// perhaps at a replay after an earlier attempt charged.
func TestStepWhoseEffectMayHaveHappenedIsShownUnknown(t *testing.T) {
	t.Parallel()
	for name, failure := range map[string]error{
		"OutcomeUnknown": &activity.OutcomeUnknownError{Reason: "test"},
		"Unauthorized":   &activity.UnauthorizedError{Tenant: "revoked"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.fail = func(step string, o order, _ int32) error {
				if step == "Charge" {
					return failure
				}
				return nil
			}
			st, err := h.run(order{ID: "o-" + name, Amount: 100})
			require.NoError(t, err)
			require.Equal(t, saga.OutcomeUnknown, st.Steps[0].Outcome)
			require.Equal(t, saga.CompensationCompleted, st.Steps[0].CompensationState)
		})
	}
}
