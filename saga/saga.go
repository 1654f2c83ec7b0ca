package saga

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/internal/errtype"
	"github.com/tempotent/tempotent/keys"
)

// Defaults applied to Options.
const (
	// QueryTypeDefault is the name of the query handler that returns the saga's State.
	QueryTypeDefault = "tempotent.saga"
	// CompensationNameDefault names a compensation in its key when Compensation.Name is empty
	// and its Activity is a function.
	CompensationNameDefault = "compensate"
	// CompensationTimeoutDefault is a compensation attempt's start-to-close timeout.
	CompensationTimeoutDefault = time.Minute
	// CompensationMaxIntervalDefault bounds the wait between compensation attempts. There is no
	// maximum number of attempts: compensations must finish.
	CompensationMaxIntervalDefault = time.Minute
)

// ErrTypeCompensationFailed is the Temporal application error type of the error Compensate
// returns when a compensation failed for good.
const ErrTypeCompensationFailed = errtype.CompensationFailed

// Options configures a Saga. The zero Options (or nil) compensates in reverse order, one at a
// time, and goes on with the rest after a compensation that fails for good.
type Options struct {
	// Parallel runs all compensations at once instead of in reverse order. Either way every
	// compensation runs, whichever others fail.
	Parallel bool
	// ContinueOnError is what sequential compensation now always does: after a compensation
	// that failed for good, go on with the remaining ones in reverse order.
	//
	// Deprecated: it has no effect on sagas that start compensating with this version. It is
	// read only when a workflow history recorded by an earlier version is replayed (that
	// version stopped at the first failure without it, and marked the rest skipped). Remove it.
	ContinueOnError bool
	// CompensationOptions are the compensations' activity options. A zero StartToCloseTimeout
	// becomes CompensationTimeoutDefault; a nil RetryPolicy becomes one that keeps trying,
	// backing off from one second to CompensationMaxIntervalDefault. Only a non-retryable
	// error (or a ScheduleToCloseTimeout you set) ends a compensation for good.
	CompensationOptions workflow.ActivityOptions
	// QueryType names the query handler; default QueryTypeDefault. Give each saga of a
	// workflow its own.
	QueryType string
}

// Compensation undoes a forward step.
//
// The contract a compensation activity must meet: it is called for every step that was
// scheduled, including steps whose forward activity failed, timed out or whose worker died, so
// the forward effect may or may not have happened. Compensating an effect that never happened is
// a success (a refund of an unknown charge is a no-op), and it finds the forward effect by the
// forward step's token (keys.CompensatesFrom), not by the forward result, which may never have
// been seen. It runs under its own key, so a retried or replayed compensation has one effect.
type Compensation struct {
	// Activity is the compensation activity: a function or a registered activity name.
	Activity any
	// Args are its arguments.
	Args []any
	// Name names the compensation in its key: by default the activity's name when Activity is
	// a string, else CompensationNameDefault. Keep it stable: renaming it gives running sagas
	// new compensation keys.
	Name string
}

func (c Compensation) name() string {
	if c.Name != "" {
		return c.Name
	}
	if name, ok := c.Activity.(string); ok {
		return name
	}
	return CompensationNameDefault
}

// Saga is the workflow-side record of forward steps and their compensations. Create one per saga
// with New, in workflow code; it is not safe for use outside the workflow's goroutines.
type Saga struct {
	opts  Options
	steps []*step
	state string
}

type step struct {
	index      int
	name       string
	key        keys.Key
	forward    workflow.Future
	outcome    Outcome
	err        string
	comp       Compensation
	compKey    keys.Key
	compStatus CompensationStatus
	compErr    string
}

// New starts a saga in the running workflow and registers its query handler (Options.QueryType).
func New(ctx workflow.Context, opts *Options) (*Saga, error) {
	s := &Saga{state: StateRunning}
	if opts != nil {
		s.opts = *opts
	}
	s.opts.QueryType = cmp.Or(s.opts.QueryType, QueryTypeDefault)
	if err := workflow.SetQueryHandler(ctx, s.opts.QueryType, func() (State, error) { return s.State(), nil }); err != nil {
		return nil, fmt.Errorf("saga: register query %q: %w", s.opts.QueryType, err)
	}
	return s, nil
}

// Step runs one forward step: it registers comp as the step's compensation first, then
// schedules activity with args under the step's key (keys.StepKey: reset-safe, the step name as
// operation, one key per occurrence when the step runs in a loop). Registering first is the
// point: a forward activity that timed out, or whose worker died, may have taken effect, and
// its compensation must run all the same.
//
// The returned future settles with the forward activity's result. ctx carries the forward
// activity's options; the activity gets its key in headers, never in its arguments.
func (s *Saga) Step(ctx workflow.Context, name string, comp Compensation, activity any, args ...any) workflow.Future {
	if comp.Activity == nil {
		return failed(ctx, fmt.Errorf("saga step %q: the compensation has no activity", name))
	}
	fctx, k, err := keys.StepKey(ctx, name)
	if err != nil {
		return failed(ctx, fmt.Errorf("saga step %q: %w", name, err))
	}
	_, ck, err := keys.WithCompensation(ctx, k, comp.name())
	if err != nil {
		return failed(ctx, fmt.Errorf("saga step %q: %w", name, err))
	}
	st := &step{index: len(s.steps), name: name, key: k, outcome: OutcomeScheduled, comp: comp,
		compKey: ck, compStatus: CompensationRegistered}
	s.steps = append(s.steps, st)

	f := workflow.ExecuteActivity(fctx, activity, args...)
	st.forward = f
	result, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		err := f.Get(ctx, nil)
		st.outcome, st.err = outcomeOf(err)
		settle.Chain(f)
	})
	return result
}

// Compensate runs the compensation of every step registered so far, in reverse order (or all at
// once with Options.Parallel), each after its forward activity has settled, so that a
// compensation never overtakes the effect it undoes. It uses a disconnected context: a
// cancelled workflow still compensates.
//
// A compensation that fails for good does not stop the others: in reverse order, the remaining
// ones still run (a refund must neither wait forever on a shipment cancel that failed, nor be
// skipped because of it). Compensations are independent undos, each of its own forward step;
// one whose undo depends on another's having happened should check for it itself and fail
// retryably until it has.
//
// It returns nil when every compensation completed. Otherwise it returns a non-retryable
// application error of type ErrTypeCompensationFailed whose cause is a *CompensationError naming
// every compensation that failed, and why.
//
// Steps already compensated are not compensated again, so calling Compensate twice is safe, and
// is how a failed compensation runs again: fix its cause, re-arm its receipt (the tempotent
// command's "receipts rearm", or operator.Client.Rearm), then have the workflow call Compensate
// again, for instance on a signal. The re-armed compensation runs again under the same key and
// token; the completed ones are not scheduled again. (Resetting the workflow to before its first
// compensation works too: every completed compensation then replays its receipt.)
func (s *Saga) Compensate(ctx workflow.Context) error {
	s.state = StateCompensating
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	pending := make([]*step, 0, len(s.steps))
	for _, st := range slices.Backward(s.steps) {
		if st.compStatus != CompensationCompleted {
			pending = append(pending, st)
		}
	}

	if s.opts.Parallel {
		wg := workflow.NewWaitGroup(ctx)
		for _, st := range pending {
			wg.Add(1)
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer wg.Done()
				s.compensate(ctx, st)
			})
		}
		wg.Wait(ctx)
	} else {
		// Sagas that began compensating before this version stopped at the first failure
		// unless ContinueOnError was set; their histories must replay as they were recorded.
		stopAtFailure := workflow.GetVersion(ctx, continueAfterFailure, workflow.DefaultVersion, 1) == workflow.DefaultVersion &&
			!s.opts.ContinueOnError
		stopped := false
		for _, st := range pending {
			if stopped {
				st.compStatus, st.compErr = CompensationSkipped, "an earlier compensation failed and ContinueOnError is off"
				continue
			}
			if !s.compensate(ctx, st) && stopAtFailure {
				stopped = true
			}
		}
	}

	var incomplete CompensationError
	for _, st := range pending {
		switch st.compStatus {
		case CompensationFailed:
			incomplete.Failed = append(incomplete.Failed, FailedCompensation{Step: st.name, Compensation: st.compKey.Operation, Token: st.compKey.Token(), Reason: st.compErr})
		case CompensationSkipped:
			incomplete.Skipped = append(incomplete.Skipped, st.name)
		}
	}
	if len(incomplete.Failed) == 0 && len(incomplete.Skipped) == 0 {
		s.state = StateCompensated
		return nil
	}
	s.state = StateCompensationFailed
	return temporal.NewNonRetryableApplicationError(incomplete.Error(), ErrTypeCompensationFailed, &incomplete)
}

// Complete marks the saga as finished without compensation, for the query.
func (s *Saga) Complete() { s.state = StateCompleted }

// compensate waits for st's forward activity to settle, then runs its compensation. It reports
// whether the compensation completed.
func (s *Saga) compensate(ctx workflow.Context, st *step) bool {
	_ = st.forward.Get(ctx, nil) // its outcome was recorded by Step's goroutine
	st.compStatus = CompensationRunning
	actx, _, err := keys.WithCompensation(workflow.WithActivityOptions(ctx, s.compensationOptions()), st.key, st.compKey.Operation)
	if err == nil {
		err = workflow.ExecuteActivity(actx, st.comp.Activity, st.comp.Args...).Get(ctx, nil)
	}
	if err != nil {
		st.compStatus, st.compErr = CompensationFailed, err.Error()
		return false
	}
	st.compStatus = CompensationCompleted
	return true
}

// continueAfterFailure is the change ID (workflow.GetVersion) of sequential compensation going on
// after a failed compensation.
const continueAfterFailure = "tempotent.saga.continue-after-failure"

func (s *Saga) compensationOptions() workflow.ActivityOptions {
	o := s.opts.CompensationOptions
	o.StartToCloseTimeout = cmp.Or(o.StartToCloseTimeout, CompensationTimeoutDefault)
	if o.RetryPolicy == nil {
		o.RetryPolicy = &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    CompensationMaxIntervalDefault,
			MaximumAttempts:    0, // unlimited: compensations must finish
		}
	}
	return o
}

func outcomeOf(err error) (Outcome, string) {
	var timeout *temporal.TimeoutError
	var canceled *temporal.CanceledError
	switch {
	case err == nil:
		return OutcomeCompleted, ""
	case errors.As(err, &timeout), errors.As(err, &canceled):
		return OutcomeUnknown, err.Error()
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() && !effectMayHaveHappened[appErr.Type()] {
		return OutcomeFailed, err.Error()
	}
	// Retries ran out on a retryable error, or the receipt says the outcome is unknown: the
	// last attempt may have taken effect.
	return OutcomeUnknown, err.Error()
}

// effectMayHaveHappened lists the non-retryable error types of the activity package after which
// the forward effect may nevertheless have happened (activity.ErrTypeOutcomeUnknown: an earlier
// attempt may have had it; activity.ErrTypePayloadTooLarge: the function ran, only its result
// was too large to record; activity.ErrTypeCompensated: a reset re-ran a step that an earlier
// run compensated, whose effect may have happened and was undone; activity.ErrTypeUnauthorized:
// the hook may have refused a replay, after an earlier attempt had the effect).
var effectMayHaveHappened = map[string]bool{
	errtype.OutcomeUnknown:  true,
	errtype.PayloadTooLarge: true,
	errtype.Compensated:     true,
	errtype.Unauthorized:    true,
}

func failed(ctx workflow.Context, err error) workflow.Future {
	f, s := workflow.NewFuture(ctx)
	s.SetError(temporal.NewNonRetryableApplicationError(err.Error(), errtype.SagaStep, err))
	return f
}

// CompensationError names every compensation that did not complete.
type CompensationError struct {
	Failed []FailedCompensation
	// Skipped lists steps whose compensation did not run because an earlier one failed. Only a
	// saga whose history an earlier version recorded (which stopped at the first failure)
	// replays to a non-empty Skipped.
	Skipped []string
}

// FailedCompensation is one compensation that failed for good.
type FailedCompensation struct {
	Step         string
	Compensation string
	Token        keys.Token
	Reason       string
}

func (e *CompensationError) Error() string {
	var b strings.Builder
	b.WriteString("saga compensation incomplete:")
	for _, f := range e.Failed {
		fmt.Fprintf(&b, " step %q: compensation %q (token %s) failed: %s;", f.Step, f.Compensation, f.Token, f.Reason)
	}
	if len(e.Skipped) > 0 {
		fmt.Fprintf(&b, " not run: %s;", strings.Join(e.Skipped, ", "))
	}
	b.WriteString(" the listed effects may still need undoing: fix the cause, re-arm each failed compensation's receipt (tempotent receipts rearm TOKEN), then have the workflow call Compensate again (completed compensations are not run again)")
	return b.String()
}
