package engine

import (
	"context"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
)

// NewInterceptor returns tempotent's worker interceptor. Install it on every worker that runs
// workflows or registered activities:
//
//	w := worker.New(c, "payments", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()},
//	})
//
// On the workflow side it decides the key of every activity a workflow schedules and sends it in
// the activity's header (keys.NewInterceptor). On the activity side it reads that key, and makes
// each heartbeat of a registered activity extend its receipt's lease.
func NewInterceptor() interceptor.WorkerInterceptor {
	return &workerInterceptor{keys: keys.NewInterceptor()}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	keys interceptor.WorkerInterceptor
}

func (i *workerInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return i.keys.InterceptWorkflow(ctx, next)
}

// InterceptActivity reads the key header first (keys' interceptor), then marks the context so a
// registered activity knows its heartbeats reach its lease.
func (i *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return i.keys.InterceptActivity(ctx, &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}})
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

type interceptedKey struct{}

func (a *activityInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return a.Next.Init(&heartbeatOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}})
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	// The value is the attempt's ForEach passes, for a plain activity that runs ForEach.
	return a.Next.ExecuteActivity(context.WithValue(ctx, interceptedKey{}, &passes{}), in)
}

func intercepted(ctx context.Context) bool { return ctx.Value(interceptedKey{}) != nil }

type heartbeatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
}

func (h *heartbeatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	h.Next.RecordHeartbeat(ctx, details...)
	if b := itemLeasesFrom(ctx); b != nil {
		b.heartbeat(ctx) // in a ForEach batch: the activity's lease and every running item's
	} else if l := leaseFrom(ctx); l != nil {
		l.heartbeat(ctx)
	}
}
