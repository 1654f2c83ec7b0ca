package activitytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// identity is what Temporal tells one attempt about itself (activity.GetInfo) and changes between
// attempts: the SDK's TestActivityEnvironment reports attempt 1, one activity ID and one task
// token for every attempt, so an activity that builds its key from them would pass a check run on
// it unchanged and charge twice when Temporal retries it.
//
// Temporal keeps the workflow's run and the activity's ID across the retries of one activity and
// counts the attempt up; every attempt gets a task token of its own. A reset starts a new run, in
// which the activity has another ID and starts again at attempt 1.
type identity struct {
	runID, activityID string
	attempt           int32
}

// firstAttempt returns the identity of an intent's first attempt, in a run of its own.
func firstAttempt() identity {
	return identity{runID: randomHex(16), activityID: randomHex(4), attempt: 1}
}

// retry returns the identity of the next attempt of the same activity in the same run.
func (id identity) retry() identity {
	id.attempt++
	return id
}

// reset returns the identity of the activity's first attempt in a run that a reset started.
func (id identity) reset() identity {
	return firstAttempt()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// attemptInfo is a worker interceptor that makes activity.GetInfo report an attempt's identity,
// to the activity and to every interceptor inside it. It goes first in the worker's interceptors,
// so that its outbound interceptor is the one next to the SDK's.
type attemptInfo struct {
	interceptor.WorkerInterceptorBase
	id    identity
	token []byte // the attempt's task token
}

func newAttemptInfo(id identity) *attemptInfo {
	tok := make([]byte, 24)
	_, _ = rand.Read(tok)
	return &attemptInfo{id: id, token: tok}
}

func (a *attemptInfo) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	in := &attemptInbound{info: a}
	in.Next = next
	return in
}

type attemptInbound struct {
	interceptor.ActivityInboundInterceptorBase
	info *attemptInfo
}

func (i *attemptInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	out := &attemptOutbound{info: i.info}
	out.Next = outbound
	return i.Next.Init(out)
}

// inChain marks the context of an attempt's interceptors and activity function.
type inChain struct{}

func (i *attemptInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	return i.Next.ExecuteActivity(context.WithValue(ctx, inChain{}, true), in)
}

type attemptOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	info *attemptInfo
}

func (o *attemptOutbound) GetInfo(ctx context.Context) sdkactivity.Info {
	info := o.Next.GetInfo(ctx)
	info.Attempt = o.info.id.attempt
	info.ActivityID = o.info.id.activityID
	info.WorkflowExecution.RunID = o.info.id.runID
	if info.WorkflowExecution.ID == "" {
		info.WorkflowExecution.ID = "activitytest-workflow"
	}
	if ctx.Value(inChain{}) != nil {
		// Inside the interceptors and the activity; the SDK's test environment looks its
		// activity up by the token it made, before them.
		info.TaskToken = o.info.token
	}
	return info
}
