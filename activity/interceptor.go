package activity

import (
	"context"

	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/tempotent/tempotent/keys"
)

// InterceptorConfig selects the activities the interceptor applies receipts to.
type InterceptorConfig struct {
	// Activities maps activity type names to their options. Activities not named here run
	// untouched (they still get key headers, so Wrap inside them works).
	Activities map[string]Options
}

// Interceptor is a worker interceptor that applies receipts to selected activities without
// changing their code, and carries key identity (it includes keys.Interceptor). Results of
// selected activities are stored as Temporal payloads and replayed byte for byte as a
// converter.RawValue. Heartbeats extend the running attempt's lease.
//
//	w := worker.New(c, "payments", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor(store, activity.InterceptorConfig{
//			Activities: map[string]activity.Options{"Charge": {DownstreamDeduplicates: true}},
//		})},
//	})
type Interceptor struct {
	keys.Interceptor
	store      *Store
	activities map[string]Options
}

var _ interceptor.WorkerInterceptor = (*Interceptor)(nil)

// NewInterceptor returns the interceptor for store. Install it on every worker that runs the
// workflows or the activities.
func NewInterceptor(store *Store, cfg InterceptorConfig) *Interceptor {
	return &Interceptor{store: store, activities: cfg.Activities}
}

// InterceptActivity implements interceptor.WorkerInterceptor. The key headers are read first
// (keys.Interceptor), then the receipt is applied.
func (i *Interceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return i.Interceptor.InterceptActivity(ctx, &receiptInbound{
		ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next},
		i:                              i,
	})
}

type receiptInbound struct {
	interceptor.ActivityInboundInterceptorBase
	i *Interceptor
}

func (r *receiptInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return r.Next.Init(&heartbeatOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}})
}

func (r *receiptInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	opts, selected := r.i.activities[sdkactivity.GetInfo(ctx).ActivityType.Name]
	if !selected {
		return r.Next.ExecuteActivity(ctx, in)
	}
	s := r.i.store
	c, err := s.callFor(ctx, &opts, in.Args)
	if err != nil {
		return nil, toTemporal(err)
	}
	p, err := s.do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
		res, err := r.Next.ExecuteActivity(ctx, in)
		if err != nil {
			return nil, err
		}
		return s.encode(c.Key, res)
	})
	if err != nil {
		return nil, toTemporal(err)
	}
	if p == nil {
		return nil, nil
	}
	return converter.NewRawValue(p), nil
}

type heartbeatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
}

func (h *heartbeatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	h.Next.RecordHeartbeat(ctx, details...)
	if l := leaseFrom(ctx); l != nil {
		l.heartbeat(ctx)
	}
}
