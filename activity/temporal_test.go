package activity_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

type ChargeRequest struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

type Charge struct {
	ID     string `json:"id"`
	Token  string `json:"token"`
	Amount int    `json:"amount"`
}

// provider is a fake downstream that counts effects per token, deduplicating like Stripe.
type provider struct {
	mu      sync.Mutex
	calls   int
	charges map[string]Charge
}

func newProvider() *provider { return &provider{charges: map[string]Charge{}} }

func (p *provider) charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	tok, ok := keys.TokenFrom(ctx)
	if !ok {
		return Charge{}, errors.New("no idempotency token in context")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if c, ok := p.charges[tok.String()]; ok {
		return c, nil
	}
	c := Charge{ID: "ch_" + tok.String()[:8], Token: tok.String(), Amount: req.Amount}
	p.charges[tok.String()] = c
	return c, nil
}

func (p *provider) counts() (calls, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, len(p.charges)
}

// newActivityEnv is a TestActivityEnvironment with the interceptor installed, whose activities
// are given the intent operation/id (keys.Given): a test activity environment has no workflow to
// decide it.
func newActivityEnv(operation, id string) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{
		Interceptors:              []interceptor.WorkerInterceptor{activity.NewInterceptor()},
		BackgroundActivityContext: keys.Given(context.Background(), operation, id),
	})
	return env
}

func TestRegisteredActivityCrashBeforeReport(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	p := newProvider()
	execute := func() Charge {
		env := newActivityEnv("charge", "order-1")
		require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
		val, err := env.ExecuteActivity("Charge", ChargeRequest{Order: "order-1", Amount: 100})
		require.NoError(t, err)
		var c Charge
		require.NoError(t, val.Get(&c))
		return c
	}

	first := execute() // completed, recorded; then the worker dies before Temporal hears of it
	again := execute() // Temporal runs the same activity again with the same info
	calls, charges := p.counts()
	require.Equal(t, 1, calls, "the provider was called again")
	require.Equal(t, 1, charges)
	require.Equal(t, first, again, "the replay is not the recorded result")
	require.Equal(t, 1, countReceipts(t, schema))
}

// TestRegisterRefusesMisuse: what a newcomer may do by mistake is refused at start-up, or before
// anything is written, never run without receipts.
func TestRegisterRefusesMisuse(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	p := newProvider()
	env := newActivityEnv("charge", "order-1")
	require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
	require.ErrorContains(t, activity.Register(env, s, "Charge", p.charge, activity.Options{}), "already registered")
	require.ErrorContains(t, activity.Register(env, s, "", p.charge, activity.Options{}), "empty")
	require.ErrorContains(t, activity.Register(env, s, "Bad\x00Name", p.charge, activity.Options{}), "control character")
	require.ErrorContains(t, activity.Register(env, s, "Negative", p.charge, activity.Options{DownstreamSettleTime: -time.Second}), "negative")
	require.ErrorContains(t, activity.Register[ChargeRequest, Charge](env, s, "Nil", nil, activity.Options{}), "nil")
	require.ErrorContains(t, activity.RegisterTx[ChargeRequest, Charge](env, s, "NilTx", nil, activity.Options{}), "nil")
	var nilStore *activity.Store
	require.ErrorContains(t, activity.Register(env, nilStore, "NilStore", p.charge, activity.Options{}), "Store is nil")
	// A real worker panics on a name registered twice; Register says so instead.
	lazy, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer lazy.Close()
	w := worker.New(lazy, "q", worker.Options{})
	w.RegisterActivityWithOptions(p.charge, sdkactivity.RegisterOptions{Name: "Plain"})
	require.ErrorContains(t, activity.Register(w, s, "Plain", p.charge, activity.Options{}), "already registered")
	// The same name on another worker is fine: each worker registers its own activities.
	require.NoError(t, activity.Register(newActivityEnv("charge", "order-1"), s, "Charge", p.charge, activity.Options{}))

	t.Run("WithoutTheInterceptor", func(t *testing.T) {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: keys.Given(context.Background(), "charge", "order-1")})
		require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
		_, err := env.ExecuteActivity("Charge", ChargeRequest{Order: "order-1", Amount: 100})
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
	})
	t.Run("NoKeyGiven", func(t *testing.T) {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
		require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
		_, err := env.ExecuteActivity("Charge", ChargeRequest{Order: "order-1", Amount: 100})
		appErr := temporaltest.RequireAppError(t, err, activity.ErrTypeInvalidKey, false)
		require.Contains(t, appErr.Error(), "keys.Given")
	})
	calls, _ := p.counts()
	require.Equal(t, 0, calls)
	require.Equal(t, 0, countReceipts(t, schema))
}

// Workflows for the TestWorkflowEnvironment tests.

func chargeOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 5},
	})
}

func chargeWorkflow(ctx workflow.Context, req ChargeRequest) (Charge, error) {
	var c Charge
	err := workflow.ExecuteActivity(keys.WithStep(chargeOptions(ctx), "charge"), "Charge", req).Get(ctx, &c)
	return c, err
}

func chargeThreeTimesWorkflow(ctx workflow.Context, req ChargeRequest) ([]Charge, error) {
	var out []Charge
	for range 3 {
		var c Charge
		if err := workflow.ExecuteActivity(keys.WithStep(chargeOptions(ctx), "charge"), "Charge", req).Get(ctx, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func newWorkflowEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
	env.RegisterWorkflow(chargeWorkflow)
	env.RegisterWorkflow(chargeThreeTimesWorkflow)
	return env
}

func TestWorkflowRetriesKeepTheKeyAndToken(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newWorkflowEnv(t)
	var (
		mu     sync.Mutex
		tokens []keys.Token
		key    keys.Key
	)
	p := newProvider()
	require.NoError(t, activity.Register(env, s, "Charge", func(ctx context.Context, req ChargeRequest) (Charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		k, err := keys.FromActivity(ctx)
		mu.Lock()
		tokens = append(tokens, tok)
		key = k
		attempt := len(tokens)
		mu.Unlock()
		if err != nil {
			return Charge{}, err
		}
		if attempt < 3 {
			return Charge{}, errors.New("provider answered 502")
		}
		return p.charge(ctx, req)
	}, activity.Options{DownstreamDeduplicates: true}))

	env.ExecuteWorkflow(chargeWorkflow, ChargeRequest{Order: "order-1", Amount: 100})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var c Charge
	require.NoError(t, env.GetWorkflowResult(&c))

	require.Len(t, tokens, 3)
	require.Equal(t, tokens[0], tokens[1])
	require.Equal(t, tokens[0], tokens[2])
	require.Equal(t, tokens[0].String(), c.Token)
	// The workflow decided the key: the named step, its first occurrence, in this run's epoch.
	require.Equal(t, "charge", key.Operation)
	require.Regexp(t, `^wf:default-test-workflow-id/[^/]+/charge#1$`, key.ID)
	require.Equal(t, 1, countReceipts(t, schema))
	_, fence := receiptState(t, schema, key)
	require.Equal(t, int64(3), fence, "each retry takes over the released receipt")
}

func TestWorkflowLoopGetsAKeyPerOccurrence(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newWorkflowEnv(t)
	p := newProvider()
	require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
	env.ExecuteWorkflow(chargeThreeTimesWorkflow, ChargeRequest{Order: "order-1", Amount: 100})
	require.NoError(t, env.GetWorkflowError())
	var out []Charge
	require.NoError(t, env.GetWorkflowResult(&out))
	require.Len(t, out, 3)
	require.NotEqual(t, out[0].Token, out[1].Token)
	require.NotEqual(t, out[1].Token, out[2].Token)
	_, charges := p.counts()
	require.Equal(t, 3, charges)
	require.Equal(t, 3, countReceipts(t, schema))
}

func TestWorkflowTenantsGetTheirOwnReceipts(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	p := newProvider()
	results := map[string]Charge{}
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		env := newWorkflowEnv(t)
		require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
		env.SetHeader(tenantHeader(t, tenant))
		// Same workflow ID, same run, same activity: only the tenant differs.
		env.ExecuteWorkflow(chargeWorkflow, ChargeRequest{Order: "order-1", Amount: 100})
		require.NoError(t, env.GetWorkflowError())
		var c Charge
		require.NoError(t, env.GetWorkflowResult(&c))
		results[tenant] = c
	}
	require.NotEqual(t, results["tenant-a"].Token, results["tenant-b"].Token, "tenant B was given tenant A's result")
	_, charges := p.counts()
	require.Equal(t, 2, charges)
	var tenants []string
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT tenant FROM "+schema+".receipts ORDER BY tenant")
	require.NoError(t, err)
	for rows.Next() {
		var tn string
		require.NoError(t, rows.Scan(&tn))
		tenants = append(tenants, tn)
	}
	require.Equal(t, []string{"tenant-a", "tenant-b"}, tenants)
}

func TestWorkflowMalformedTenantIsRefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	p := newProvider()
	env := newWorkflowEnv(t)
	require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))
	env.SetHeader(tenantHeaderUnchecked(t, "acme\x00evil"))
	env.ExecuteWorkflow(chargeWorkflow, ChargeRequest{Order: "order-1", Amount: 100})
	// The propagator refuses to carry it to the activity, so the workflow fails scheduling it.
	require.ErrorContains(t, env.GetWorkflowError(), "invalid idempotency key: tenant has control character")
	calls, _ := p.counts()
	require.Equal(t, 0, calls)
	require.Equal(t, 0, countReceipts(t, schema))
}

func TestHeartbeatsExtendTheLease(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newWorkflowEnv(t)
	env.SetTestTimeout(30 * time.Second)
	db := pgtest.Pool(t) // here: the activity runs on the SDK's goroutine, where t must not fail
	var leaseLeft time.Duration
	require.NoError(t, activity.Register(env, s, "Slow", func(ctx context.Context, _ struct{}) (struct{}, error) {
		// Heartbeat for three heartbeat timeouts: without extension the lease would have ended.
		for range 15 {
			sdkactivity.RecordHeartbeat(ctx)
			time.Sleep(200 * time.Millisecond)
		}
		var us int64
		err := db.QueryRow(ctx, "SELECT (extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint FROM "+schema+".receipts").Scan(&us)
		leaseLeft = time.Duration(us) * time.Microsecond
		return struct{}{}, err
	}, activity.Options{DownstreamDeduplicates: true}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second})
		return workflow.ExecuteActivity(ctx, "Slow", struct{}{}).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "SlowWorkflow"})
	env.ExecuteWorkflow("SlowWorkflow")
	require.NoError(t, env.GetWorkflowError())
	require.Greater(t, leaseLeft, time.Duration(0), "the lease ended while the attempt was heartbeating")
}

// An activity without a heartbeat timeout holds its receipt until its deadline: the lease is
// bounded by the heartbeat timeout only when there is one.
func TestLeaseWithoutAHeartbeatTimeoutLastsToTheDeadline(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newActivityEnv("lease", "order-1")
	db := pgtest.Pool(t) // here: the activity may run on another goroutine, where t must not fail
	leaseLeft := func(ctx context.Context, _ int) (float64, error) {
		var left float64
		err := db.QueryRow(ctx, "SELECT extract(epoch FROM lease_expires_at - now()) FROM "+schema+".receipts").Scan(&left)
		return left, err
	}
	require.NoError(t, activity.Register(env, s, "LeaseLeft", leaseLeft, activity.Options{}))
	v, err := env.ExecuteActivity("LeaseLeft", 1)
	require.NoError(t, err)
	var left float64
	require.NoError(t, v.Get(&left))
	require.Greater(t, left, 1.0, "the lease ended with the activity still running")
}

// Heartbeats extend the lease at most once a third of the lease: an activity that heartbeats in
// a tight loop does not write the receipt on every beat, before the first extension or after.
func TestHeartbeatsAreThrottled(t *testing.T) {
	t.Parallel()
	var trips pgtest.Counter
	schema := pgtest.Schema(t)
	s, err := activity.NewStore(pgtest.CountingPool(t, &trips), &activity.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	env := newWorkflowEnv(t)
	require.NoError(t, activity.Register(env, s, "Beat", func(ctx context.Context, _ struct{}) (struct{}, error) {
		beat := func() {
			for range 100 {
				sdkactivity.RecordHeartbeat(ctx)
			}
		}
		beat()
		time.Sleep(2 * time.Second) // past a third of the lease: the next beat extends it
		beat()
		return struct{}{}, nil
	}, activity.Options{DownstreamDeduplicates: true}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Hour, HeartbeatTimeout: 5 * time.Second})
		return workflow.ExecuteActivity(ctx, "Beat", struct{}{}).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "BeatWorkflow"})
	trips.Reset()
	env.ExecuteWorkflow("BeatWorkflow")
	require.NoError(t, env.GetWorkflowError())
	// Reserve, complete, and one extension per third of the lease that passed: a slow machine
	// may see the second hundred beats span more than one third, never a hundred.
	require.Less(t, trips.RoundTrips(), int64(10), "heartbeats wrote the receipt on every beat")
	require.Greater(t, trips.RoundTrips(), int64(2), "no heartbeat extended the lease")
}

// headerMap writes a context propagator's headers into a Temporal header.
type headerMap map[string]*commonpb.Payload

func (h headerMap) Set(name string, p *commonpb.Payload) { h[name] = p }

// tenantHeader is the header a client with the tenant propagator writes for tenant.
func tenantHeader(t *testing.T, tenant string) *commonpb.Header {
	t.Helper()
	h := headerMap{}
	require.NoError(t, keys.TenantPropagator().Inject(keys.WithTenant(context.Background(), tenant), h))
	return &commonpb.Header{Fields: h}
}

// tenantHeaderUnchecked writes a tenant header as a client without the propagator's check would.
func tenantHeaderUnchecked(t *testing.T, tenant string) *commonpb.Header {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(tenant)
	require.NoError(t, err)
	return &commonpb.Header{Fields: map[string]*commonpb.Payload{"tempotent-tenant": p}}
}
