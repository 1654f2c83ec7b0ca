package keys

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/internal/errtype"
)

// NewInterceptor returns the worker interceptor that carries intent identity from workflow code
// to activities (see WithStep): on the workflow side it decides the key of each activity a
// workflow schedules and writes it in the activity's header; on the activity side it reads it,
// for FromActivity. Most users install the activity package's interceptor, which includes it;
// install this one alone only to derive keys without receipts.
func NewInterceptor() interceptor.WorkerInterceptor { return &workerInterceptor{} }

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*workerInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &workflowInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

func (*workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}}
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	run runState
}

func (w *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	w.run.occurrences = make(map[string]int)
	return w.Next.Init(&workflowOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, run: &w.run})
}

func (w *workflowInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	header := interceptor.WorkflowHeader(ctx)
	w.run.epoch = epochOf(workflow.GetInfo(ctx), epochHeader{epoch: readString(header, headerEpoch), refused: readString(header, headerEpochRefused)}, workflow.GetLastError(ctx))
	result, err := w.Next.ExecuteWorkflow(workflow.WithValue(ctx, runKey{}, &w.run), in)
	if w.run.epoch.mark {
		err = markRefused(err)
	}
	return result, err
}

func (w *workflowInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	ctx = workflow.WithValue(ctx, runKey{}, &w.run)
	ctx = workflow.WithValue(ctx, updateKey{}, workflow.GetCurrentUpdateInfo(ctx).ID)
	return w.Next.ExecuteUpdate(ctx, in)
}

type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	run *runState
}

func (w *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if err := writeIntent(ctx, activityType); err != nil {
		return failedFuture(ctx, err)
	}
	return w.Next.ExecuteActivity(ctx, activityType, args...)
}

// ExecuteLocalActivity keys a local activity as a regular one. The SDK retries a local activity
// by timer with the header it was first scheduled with, so its retries keep its key although
// they get new activity IDs.
func (w *workflowOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if err := writeIntent(ctx, activityType); err != nil {
		return failedFuture(ctx, err)
	}
	return w.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

// ExecuteChildWorkflow gives the child its epoch: the identity in this workflow that an activity
// named as the child is (WithStep, WithID, WithRunScope, the update handler, else the child's
// workflow type) would have, written in the child's start header. So the child's workflow-scope
// keys survive what the parent's survive: a parent's reset or retry that starts the child again
// (under the same workflow ID) replays its effects instead of repeating them.
//
// A parent refused its workflow-scope keys writes why instead, and the child's workflow scope is
// refused too: keyed by its own first run, a child started again would act again.
//
// It refuses a child workflow started with a context whose pinned key (StepKey,
// WithCompensation) no activity took yet: the caller holds a key that names no effect, since the
// child keys its own activities.
func (w *workflowOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...any) workflow.ChildWorkflowFuture {
	if p, _ := ctx.Value(pinnedKey{}).(*pin); p != nil && p.usedBy == "" {
		err := fmt.Errorf("%w: child workflow %s was started with the context that %s returned before any activity took its key (%s %s): a child workflow keys its own activities, never under its parent's key; start it with the context you passed to %s, and schedule the activity that the key is for with the returned one",
			ErrPinnedContext, childWorkflowType, p.by, p.in.Operation, p.in.ID, p.by)
		return newFailedChild(failedFuture(ctx, err))
	}
	if h := interceptor.WorkflowHeader(ctx); h != nil {
		name, value := headerEpoch, ""
		switch epoch, refused := childEpoch(ctx, childWorkflowType); {
		case refused != "":
			name, value = headerEpochRefused, refused
		default:
			value = epoch
		}
		if p, err := headerConverter.ToPayload(value); err == nil && value != "" {
			h[name] = p
		}
	}
	return w.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
}

// failedChild is a child workflow that was never started: every future fails with its error.
// It embeds the interface so that it keeps compiling when the SDK adds methods; it overrides
// every method the SDK has now.
type failedChild struct {
	workflow.ChildWorkflowFuture
	err workflow.Future
}

func newFailedChild(f workflow.Future) failedChild { return failedChild{err: f} }

func (c failedChild) Get(ctx workflow.Context, v any) error      { return c.err.Get(ctx, v) }
func (c failedChild) IsReady() bool                              { return c.err.IsReady() }
func (c failedChild) GetChildWorkflowExecution() workflow.Future { return c.err }
func (c failedChild) SignalChildWorkflow(workflow.Context, string, any) workflow.Future {
	return c.err
}
func (c failedChild) SignalChildWorkflowWithOptions(workflow.Context, string, any, workflow.SignalChildWorkflowOptions) workflow.Future {
	return c.err
}

func (w *workflowOutbound) NewContinueAsNewError(ctx workflow.Context, wfn any, args ...any) error {
	w.writeEpoch(ctx)
	return w.Next.NewContinueAsNewError(ctx, wfn, args...)
}

func (w *workflowOutbound) NewContinueAsNewErrorWithOptions(ctx workflow.Context, opts workflow.ContinueAsNewErrorOptions, wfn any, args ...any) error {
	w.writeEpoch(ctx)
	return w.Next.NewContinueAsNewErrorWithOptions(ctx, opts, wfn, args...)
}

// writeEpoch gives the next run its own generation of workflow-scope keys: see epoch.
func (w *workflowOutbound) writeEpoch(ctx workflow.Context) {
	if h := interceptor.WorkflowHeader(ctx); h != nil {
		if p, err := headerConverter.ToPayload(nextEpoch(workflow.GetInfo(ctx))); err == nil {
			h[headerEpoch] = p
		}
	}
}

func writeIntent(ctx workflow.Context, activityType string) error {
	header := interceptor.WorkflowHeader(ctx)
	if header == nil {
		return nil
	}
	in, err := decide(ctx, activityType)
	if err != nil {
		return err
	}
	if in.Refused == "" {
		if err := workflowKey(ctx, in).Validate(); err != nil {
			return err
		}
	}
	return in.write(header)
}

// failedFuture fails the scheduling of an activity whose key cannot be decided, with a
// non-retryable tempotent.InvalidKey error: workflow code sees it on the activity's future, and
// the activity is never scheduled.
func failedFuture(ctx workflow.Context, err error) workflow.Future {
	f, s := workflow.NewFuture(ctx)
	s.SetError(temporal.NewNonRetryableApplicationError(err.Error(), errtype.InvalidKey, err))
	return f
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

type headerKey struct{}

// headerRead is what the activity-side interceptor read from the activity's header.
type headerRead struct {
	intent  intent
	present bool
	err     error
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	var h headerRead
	h.intent, h.present, h.err = readIntent(interceptor.Header(ctx))
	return a.Next.ExecuteActivity(context.WithValue(ctx, headerKey{}, h), in)
}
