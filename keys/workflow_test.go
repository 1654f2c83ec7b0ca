package keys_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
)

// keyPair is what keysWorkflow returns: the key that workflow code decided with StepKey (zero
// for the other ways of naming an intent) and the key that the activity scheduled with it got
// from keys.FromActivity.
type keyPair struct {
	Workflow keys.Key
	Activity keys.Key
}

// How keysWorkflow names the intent of its one activity.
const (
	viaStepKey       = "StepKey"
	viaWithStep      = "WithStep"
	viaWithID        = "WithID"
	viaStepKeyWithID = "StepKey+WithID"
	viaRunScope      = "WithRunScope"
	viaLocal         = "WithStep, local activity"
	viaDefault       = "nothing"
)

const keyActivity = "Key"

// activityKey is the activity side: the key of the activity running in ctx.
func activityKey(ctx context.Context) (keys.Key, error) { return keys.FromActivity(ctx) }

func keysWorkflow(ctx workflow.Context, via, name string) (keyPair, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	var (
		out keyPair
		err error
	)
	switch via {
	case viaStepKey:
		ctx, out.Workflow, err = keys.StepKey(ctx, name)
	case viaWithStep:
		ctx = keys.WithStep(ctx, name)
	case viaWithID:
		ctx = keys.WithID(keys.WithStep(ctx, "charge"), name)
	case viaStepKeyWithID:
		ctx, out.Workflow, err = keys.StepKey(keys.WithID(ctx, name), "charge")
	case viaRunScope:
		ctx = keys.WithRunScope(keys.WithStep(ctx, name))
	case viaLocal:
		err = workflow.ExecuteLocalActivity(keys.WithStep(ctx, name), activityKey).Get(ctx, &out.Activity)
		return out, err
	}
	if err != nil {
		return out, err
	}
	err = workflow.ExecuteActivity(ctx, keyActivity).Get(ctx, &out.Activity)
	return out, err
}

// headerMap writes a context propagator's headers into a Temporal header.
type headerMap map[string]*commonpb.Payload

func (h headerMap) Set(name string, p *commonpb.Payload) { h[name] = p }

// newEnv returns a test workflow environment with the interceptor (unless without) and the tenant
// propagator installed, whose workflow is started under workflowID by a client whose context
// carries tenant.
func newEnv(t *testing.T, workflowID, tenant string, without bool) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	if !without {
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()}})
	}
	env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflowID})
	header := headerMap{}
	require.NoError(t, keys.TenantPropagator().Inject(keys.WithTenant(context.Background(), tenant), header))
	env.SetHeader(&commonpb.Header{Fields: header})
	env.RegisterWorkflow(keysWorkflow)
	env.RegisterActivityWithOptions(activityKey, activity.RegisterOptions{Name: keyActivity})
	return env
}

func runKeysWorkflow(t *testing.T, workflowID, tenant, via, name string) (keyPair, error) {
	t.Helper()
	env := newEnv(t, workflowID, tenant, false)
	env.ExecuteWorkflow(keysWorkflow, via, name)
	require.True(t, env.IsWorkflowCompleted())
	if err := env.GetWorkflowError(); err != nil {
		return keyPair{}, err
	}
	var out keyPair
	require.NoError(t, env.GetWorkflowResult(&out))
	return out, nil
}

// TestWorkflowDecidesTheKey runs a workflow under a tenant and checks, for each way of naming an
// intent, the key the activity gets: the operation and ID that workflow code decided, in the
// workflow's namespace and tenant; and that StepKey returns the very key its activity gets.
// Keys that disagreed would give a compensation another key than its forward step's receipt.
func TestWorkflowDecidesTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, workflowID, tenant, via, arg string
		wantOp, wantID                     string // wantID is a regular expression: the environment chooses the run ID
	}{
		{"Default", "order-123", "acme", viaDefault, "", keyActivity, `^wf:order-123/[^/]+/Key#1$`},
		{"WithStep", "order-123", "acme", viaWithStep, "charge", "charge", `^wf:order-123/[^/]+/charge#1$`},
		{"StepKey", "order-123", "acme", viaStepKey, "charge", "charge", `^wf:order-123/[^/]+/charge#1$`},
		{"StepKeyEscaped", "orders/eu#1%", "acme", viaStepKey, "charge/card#v2%", "charge/card#v2%", `^wf:orders%2Feu%231%25/[^/]+/charge%2Fcard%23v2%25#1$`},
		{"WithoutTenant", "order-123", "", viaStepKey, "charge", "charge", `^wf:order-123/[^/]+/charge#1$`},
		{"WithID", "order-123", "acme", viaWithID, "order-77", "charge", `^explicit:order-77$`},
		{"StepKeyWithID", "order-123", "acme", viaStepKeyWithID, "order-77", "charge", `^explicit:order-77$`},
		{"WithIDLooksDerived", "order-123", "acme", viaWithID, "wf:order-123/run/charge#1", "charge", `^explicit:wf:order-123/run/charge#1$`},
		{"RunScope", "order-123", "acme", viaRunScope, "charge", "charge", `^run:order-123/[^/]+/charge#1$`},
		{"LocalActivity", "order-123", "acme", viaLocal, "charge", "charge", `^wf:order-123/[^/]+/charge#1$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := runKeysWorkflow(t, tc.workflowID, tc.tenant, tc.via, tc.arg)
			require.NoError(t, err)
			k := got.Activity
			require.Equal(t, tc.tenant, k.Tenant, "the key lost the tenant the workflow was started with")
			require.Equal(t, "default-test-namespace", k.Namespace)
			require.Equal(t, tc.wantOp, k.Operation)
			require.Regexp(t, tc.wantID, k.ID)
			require.NoError(t, k.Validate())
			if got.Workflow != (keys.Key{}) {
				require.Equal(t, got.Workflow, k, "the activity got another key than StepKey decided")
			}
		})
	}
}

// TestWithIDIsOneIntentAcrossWorkflows is the program a newcomer wrote: two workflows that name
// the same business key get the same key, whatever the activity worker is configured with.
func TestWithIDIsOneIntentAcrossWorkflows(t *testing.T) {
	t.Parallel()
	a, err := runKeysWorkflow(t, "checkout-1", "acme", viaWithID, "order-77")
	require.NoError(t, err)
	b, err := runKeysWorkflow(t, "checkout-2", "acme", viaWithID, "order-77")
	require.NoError(t, err)
	require.Equal(t, a.Activity, b.Activity)
	c, err := runKeysWorkflow(t, "checkout-2", "acme", viaWithStep, "charge")
	require.NoError(t, err)
	require.NotEqual(t, a.Activity, c.Activity)
}

// TestLoopOccurrences: the same step scheduled in a loop gets one key per occurrence, counted
// alike by StepKey and the interceptor.
func TestLoopOccurrences(t *testing.T) {
	t.Parallel()
	loop := func(ctx workflow.Context) ([]keys.Key, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		var out []keys.Key
		for i := range 4 {
			sctx := keys.WithStep(ctx, "charge")
			if i%2 == 1 {
				var err error
				if sctx, _, err = keys.StepKey(ctx, "charge"); err != nil {
					return nil, err
				}
			}
			var k keys.Key
			if err := workflow.ExecuteActivity(sctx, keyActivity).Get(ctx, &k); err != nil {
				return nil, err
			}
			out = append(out, k)
		}
		return out, nil
	}
	env := newEnv(t, "order-1", "", false)
	env.RegisterWorkflowWithOptions(loop, workflow.RegisterOptions{Name: "loop"})
	env.ExecuteWorkflow("loop")
	require.NoError(t, env.GetWorkflowError())
	var got []keys.Key
	require.NoError(t, env.GetWorkflowResult(&got))
	require.Len(t, got, 4)
	for i, k := range got {
		require.Regexp(t, `^wf:order-1/[^/]+/charge#`+string(rune('1'+i))+`$`, k.ID)
	}
}

// TestRefusals: an intent the activity side cannot honour is refused with a typed error, never
// keyed some other way.
func TestRefusals(t *testing.T) {
	t.Parallel()
	t.Run("WorkflowWithoutInterceptor", func(t *testing.T) {
		t.Parallel()
		env := newEnv(t, "order-1", "", true)
		env.ExecuteWorkflow(keysWorkflow, viaWithID, "order-77")
		require.ErrorContains(t, env.GetWorkflowError(), "install")
	})
	t.Run("StepKeyWithoutInterceptor", func(t *testing.T) {
		t.Parallel()
		env := newEnv(t, "order-1", "", true)
		env.ExecuteWorkflow(keysWorkflow, viaStepKey, "charge")
		require.ErrorContains(t, env.GetWorkflowError(), keys.ErrNoIdentity.Error())
	})
	t.Run("MalformedID", func(t *testing.T) {
		t.Parallel()
		_, err := runKeysWorkflow(t, "order-1", "", viaWithID, "order\x00")
		require.ErrorContains(t, err, "control character")
	})

	newActivityEnv := func(ctx context.Context) *testsuite.TestActivityEnvironment {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()}, BackgroundActivityContext: ctx})
		env.RegisterActivity(activityKey)
		return env
	}
	t.Run("TestActivityEnvironmentWithoutKey", func(t *testing.T) {
		t.Parallel()
		_, err := newActivityEnv(context.Background()).ExecuteActivity(activityKey)
		require.ErrorContains(t, err, "keys.Given", "every TestActivityEnvironment has the same IDs: keying by them would share a key")
	})
	t.Run("Given", func(t *testing.T) {
		t.Parallel()
		v, err := newActivityEnv(keys.Given(context.Background(), "charge", "order-9")).ExecuteActivity(activityKey)
		require.NoError(t, err)
		var k keys.Key
		require.NoError(t, v.Get(&k))
		require.Equal(t, keys.Key{Namespace: "default-test-namespace", Operation: "charge", ID: "explicit:order-9"}, k)
	})
	for name, header := range map[string]string{
		"NewerVersion":                `{"v":2,"op":"charge","id":"wf:a/b/charge#1"}`,
		"NotJSON":                     `{"v":`,
		"EmptyID":                     `{"v":1,"op":"charge","id":""}`,
		"CompensationOfAnotherTenant": `{"v":1,"op":"refund","id":"comp:charge/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","comp":{"op":"charge","id":"wf:a/b/charge#1"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := newActivityEnv(keys.Given(context.Background(), "charge", "order-9"))
			env.SetHeader(&commonpb.Header{Fields: map[string]*commonpb.Payload{
				"tempotent-intent": {Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}, Data: []byte(header)},
			}})
			_, err := env.ExecuteActivity(activityKey)
			require.Error(t, err)
			require.Contains(t, err.Error(), keys.ErrInvalidKey.Error(), "a header it cannot honour must be refused, not replaced by the given key")
		})
	}
}

// TestUpdateScope: an activity scheduled from an update handler is keyed by the update's ID, so
// the same update delivered again (after Continue-As-New) gets the same key; two updates differ.
func TestUpdateScope(t *testing.T) {
	t.Parallel()
	wf := func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		if err := workflow.SetUpdateHandler(ctx, "pay", func(ctx workflow.Context) (keys.Key, error) {
			var k keys.Key
			ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
			err := workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), keyActivity).Get(ctx, &k)
			return k, err
		}); err != nil {
			return err
		}
		return workflow.Await(ctx, func() bool { return false })
	}
	env := newEnv(t, "order-1", "", false)
	env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "updates"})
	got := map[string]keys.Key{}
	for _, id := range []string{"u/1", "u-2"} {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow("pay", id, &updateCallbacks{t: t, done: func(v keys.Key) { got[id] = v }})
		}, time.Second)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow("updates")
	require.Equal(t, "upd:order-1/u%2F1/charge#1", got["u/1"].ID)
	require.Equal(t, "upd:order-1/u-2/charge#1", got["u-2"].ID)
}

type updateCallbacks struct {
	t    *testing.T
	done func(keys.Key)
}

func (u *updateCallbacks) Accept()          {}
func (u *updateCallbacks) Reject(err error) { u.t.Errorf("update rejected: %v", err) }
func (u *updateCallbacks) Complete(success any, err error) {
	if err != nil {
		u.t.Errorf("update failed: %v", err)
		return
	}
	k, ok := success.(keys.Key)
	if !ok {
		u.t.Errorf("update returned %T", success)
		return
	}
	u.done(k)
}
