package keys_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
)

// keyPair is what keysWorkflow returns: the key that workflow code chose (zero when it named
// the intent with WithStep or WithID instead of pinning a key) and the key that the activity
// scheduled with it derived with keys.FromActivity.
type keyPair struct {
	Workflow keys.Key
	Activity keys.Key
}

// How keysWorkflow keys its one activity.
const (
	viaStepKey     = "StepKey"
	viaWithStep    = "WithStep"
	viaExplicitKey = "ExplicitKey"
	viaWithID      = "WithID"
)

const deriveKeyActivity = "DeriveKey"

// deriveKey is the activity side: the key of the activity running in ctx, as the activity
// package's wrappers derive it.
func deriveKey(ctx context.Context, opts keys.Options) (keys.Key, error) {
	return keys.FromActivity(ctx, opts)
}

// keysWorkflow schedules one deriveKey activity, naming its intent as via says: name is the step
// (StepKey, WithStep) or the explicit ID (ExplicitKey, WithID, with operation "charge"). The
// header forms derive with the options that give the same intent as the pinned forms.
func keysWorkflow(ctx workflow.Context, via, name string) (keyPair, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var (
		out  keyPair
		opts keys.Options
		err  error
	)
	switch via {
	case viaStepKey:
		ctx, out.Workflow, err = keys.StepKey(ctx, name)
	case viaWithStep:
		ctx, opts = keys.WithStep(ctx, name), keys.Options{Operation: name}
	case viaExplicitKey:
		ctx, out.Workflow, err = keys.ExplicitKey(ctx, "charge", name)
	case viaWithID:
		ctx, opts = keys.WithID(ctx, name), keys.Options{Scope: keys.ScopeExplicit, Operation: "charge"}
	}
	if err != nil {
		return out, err
	}
	err = workflow.ExecuteActivity(ctx, deriveKeyActivity, opts).Get(ctx, &out.Activity)
	return out, err
}

// headerMap writes a context propagator's headers into a Temporal header.
type headerMap map[string]*commonpb.Payload

func (h headerMap) Set(name string, p *commonpb.Payload) { h[name] = p }

// runKeysWorkflow runs keysWorkflow in a fresh test environment with keys.Interceptor and
// keys.TenantPropagator installed, started under workflowID by a client whose context carries
// tenant (none when empty), as client.ExecuteWorkflow on keys.WithTenant(ctx, tenant) would.
// Fresh environments share the test environment's run ID, so two runs with one workflowID are
// one workflow run as far as keys go.
func runKeysWorkflow(t *testing.T, workflowID, tenant, via, name string) keyPair {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&keys.Interceptor{}}})
	env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflowID})
	header := headerMap{}
	require.NoError(t, keys.TenantPropagator().Inject(keys.WithTenant(context.Background(), tenant), header))
	env.SetHeader(&commonpb.Header{Fields: header})
	env.RegisterWorkflow(keysWorkflow)
	env.RegisterActivityWithOptions(deriveKey, activity.RegisterOptions{Name: deriveKeyActivity})

	env.ExecuteWorkflow(keysWorkflow, via, name)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var out keyPair
	require.NoError(t, env.GetWorkflowResult(&out))
	return out
}

// TestWorkflowAndActivityAgreeOnKeys runs a workflow under a tenant and checks, for StepKey and
// ExplicitKey, that the key workflow code gets carries the tenant and the workflow's namespace,
// that the activity it pins derives the very same key, and that the header path (WithStep,
// WithID: the activity side derives the ID from the headers) derives it too, for IDs whose parts
// need escaping as well. Keys that disagree would give a compensation another key than its
// forward step's record, and a key without the tenant would share one tenant's receipts with
// another.
func TestWorkflowAndActivityAgreeOnKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		workflowID, tenant   string
		pinned, header, step string
		wantID               string // a regular expression: the test environment chooses the run ID
	}{
		{"StepKey", "order-123", "acme", viaStepKey, viaWithStep, "charge", `^wf:order-123/[^/]+/charge#1$`},
		{"StepKeyEscaped", "orders/eu#1%", "acme", viaStepKey, viaWithStep, "charge/card#v2%",
			`^wf:orders%2Feu%231%25/[^/]+/charge%2Fcard%23v2%25#1$`},
		{"StepKeyWithoutTenant", "order-123", "", viaStepKey, viaWithStep, "charge", `^wf:order-123/[^/]+/charge#1$`},
		{"ExplicitKey", "order-123", "acme", viaExplicitKey, viaWithID, "order-123/charge", `^explicit:order-123/charge$`},
		{"ExplicitKeyLooksDerived", "order-123", "acme", viaExplicitKey, viaWithID, "wf:order-123/run/charge#1",
			`^explicit:wf:order-123/run/charge#1$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pinned := runKeysWorkflow(t, tc.workflowID, tc.tenant, tc.pinned, tc.step)
			k := pinned.Workflow
			require.Equal(t, tc.tenant, k.Tenant, "%s lost the tenant the workflow was started with", tc.pinned)
			require.Equal(t, "default-test-namespace", k.Namespace)
			require.Regexp(t, tc.wantID, k.ID)
			require.Equal(t, k, pinned.Activity, "the activity derived another key than %s pinned", tc.pinned)
			require.NoError(t, k.Validate())

			header := runKeysWorkflow(t, tc.workflowID, tc.tenant, tc.header, tc.step)
			require.Equal(t, keys.Key{}, header.Workflow)
			require.Equal(t, k, header.Activity, "%s and %s key the same intent differently", tc.pinned, tc.header)
		})
	}
}
