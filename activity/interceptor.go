package activity

import (
	"go.temporal.io/sdk/interceptor"

	"github.com/tempotent/tempotent/internal/engine"
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
	return engine.NewInterceptor()
}
