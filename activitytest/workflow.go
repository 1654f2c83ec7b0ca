package activitytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"

	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// ErrTypeCrashBeforeReport is the type of the error CrashBeforeReport makes an attempt fail
// with, after its receipt was written: Temporal retries it, as it retries an attempt whose
// worker died.
const ErrTypeCrashBeforeReport = "activitytest.CrashBeforeReport"

// WorkflowEnv is a TestWorkflowEnvironment for workflows whose activities have receipts:
// tempotent's interceptor (workflow and activity sides) and tenant propagator are installed,
// and the workflow ID is unique to the test, so that the keys two tests derive never collide in
// a shared store (the SDK's default ID is the same for every test).
type WorkflowEnv struct {
	*testsuite.TestWorkflowEnvironment
	// WorkflowID is the ID the workflow runs under; set another with SetStartWorkflowOptions.
	WorkflowID string
	crashes    *crashes
}

// NewWorkflowEnv returns a WorkflowEnv. Register the workflow, and the activities with
// activity.Register(env, store, …), on it.
func NewWorkflowEnv(tb testing.TB) *WorkflowEnv {
	tb.Helper()
	suite := newSuite(tb)
	env := suite.NewTestWorkflowEnvironment()
	var b [6]byte
	_, _ = rand.Read(b[:])
	e := &WorkflowEnv{TestWorkflowEnvironment: env, WorkflowID: tb.Name() + "/" + hex.EncodeToString(b[:]), crashes: &crashes{armed: map[string]int{}}}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{e.crashes, activity.NewInterceptor()}})
	env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: e.WorkflowID})
	return e
}

// newSuite returns a test suite that logs to tb: the SDK logs every timer and activity result at
// debug level, and activity errors to stdout; warnings and errors go to the test's log instead.
func newSuite(tb testing.TB) *testsuite.WorkflowTestSuite {
	suite := &testsuite.WorkflowTestSuite{}
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(testLog{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	return suite
}

// testLog writes to tb's log.
type testLog struct{ tb testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.tb.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// CrashBeforeReport makes the next attempt of the activity named name run to the end — its
// effect happens and its receipt is written — and then fail with ErrTypeCrashBeforeReport, as
// an attempt whose worker died before reporting: Temporal retries it (give the activity a retry
// policy that does), and the retry must replay the recorded result without a second effect.
func (e *WorkflowEnv) CrashBeforeReport(name string) {
	e.crashes.mu.Lock()
	defer e.crashes.mu.Unlock()
	e.crashes.armed[name]++
}

// Crashed returns how many armed crashes have happened for the activity named name.
func (e *WorkflowEnv) Crashed(name string) int {
	e.crashes.mu.Lock()
	defer e.crashes.mu.Unlock()
	return e.crashes.done[name]
}

// crashes is the interceptor that fails armed attempts after they ran.
type crashes struct {
	interceptor.WorkerInterceptorBase
	mu    sync.Mutex
	armed map[string]int
	done  map[string]int
}

func (c *crashes) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &crashingActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, crashes: c}
}

type crashingActivity struct {
	interceptor.ActivityInboundInterceptorBase
	crashes *crashes
}

func (a *crashingActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	out, err := a.Next.ExecuteActivity(ctx, in)
	name := sdkactivity.GetInfo(ctx).ActivityType.Name
	c := a.crashes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed[name] == 0 {
		return out, err
	}
	c.armed[name]--
	if c.done == nil {
		c.done = map[string]int{}
	}
	c.done[name]++
	return nil, temporal.NewApplicationError("activitytest: the worker died before it reported this attempt's outcome", ErrTypeCrashBeforeReport)
}

// NewActivityEnv returns the SDK's TestActivityEnvironment with tempotent's interceptor
// installed and its activities given an intent (keys.Given), which an activity environment has
// no workflow to decide: operation, and id — or, when id is empty, an ID unique to the test, so
// that no other test's receipts answer. Run the same intent again (Temporal's retry after a
// crash before report) with a second environment and the same id.
func NewActivityEnv(tb testing.TB, operation, id string) *testsuite.TestActivityEnvironment {
	tb.Helper()
	if id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		id = tb.Name() + "/" + hex.EncodeToString(b[:])
	}
	return newActivityEnv(tb, operation, id)
}

// newActivityEnv is NewActivityEnv with the interceptors in first ahead of tempotent's.
func newActivityEnv(tb testing.TB, operation, id string, first ...interceptor.WorkerInterceptor) *testsuite.TestActivityEnvironment {
	env := newSuite(tb).NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{
		Interceptors:              append(first, activity.NewInterceptor()),
		BackgroundActivityContext: keys.Given(context.Background(), operation, id),
	})
	return env
}
