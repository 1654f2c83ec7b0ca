package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/shard"
)

func chargeWorkflow(ctx workflow.Context, order string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var out string
	if err := workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), "Charge", order).Get(ctx, &out); err != nil {
		return "", err
	}
	err := workflow.ExecuteActivity(keys.WithStep(ctx, "ledger"), "Ledger", order).Get(ctx, nil)
	return out, err
}

// runWorkflow runs chargeWorkflow for tenant on a test environment whose activities are
// registered through r.
func runWorkflow(t *testing.T, r *shard.Router, tenant string) (string, error) {
	t.Helper()
	env := newEnv()
	env.RegisterWorkflow(chargeWorkflow)
	require.NoError(t, shard.Register(env, r, "Charge", func(ctx context.Context, order string) (string, error) {
		return "charged " + order, nil
	}, activity.Options{DownstreamDeduplicates: true}))
	require.NoError(t, shard.RegisterTx(env, r, "Ledger", func(ctx context.Context, tx pgx.Tx, order string) (struct{}, error) {
		_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2)", keys.TenantFrom(ctx), order)
		return struct{}{}, err
	}, activity.Options{}))
	return executeAs(t, env, tenant, chargeWorkflow, "order-1")
}

// newEnv is a test environment with tempotent's interceptor and the tenant's propagator.
func newEnv() *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
	return env
}

// executeAs runs wf(order) on env under tenant and returns its result.
func executeAs(t *testing.T, env *testsuite.TestWorkflowEnvironment, tenant string, wf func(workflow.Context, string) (string, error), order string) (string, error) {
	t.Helper()
	h := map[string]*commonpb.Payload{}
	require.NoError(t, keys.TenantPropagator().Inject(keys.WithTenant(context.Background(), tenant), headerWriter(h)))
	env.SetHeader(&commonpb.Header{Fields: h})
	env.ExecuteWorkflow(wf, order)
	if err := env.GetWorkflowError(); err != nil {
		return "", err
	}
	var out string
	require.NoError(t, env.GetWorkflowResult(&out))
	return out, nil
}

type headerWriter map[string]*commonpb.Payload

func (h headerWriter) Set(k string, p *commonpb.Payload) { h[k] = p }

// TestRegisteredActivitiesFollowTheirTenant: registered through a Router, an activity's receipt
// (and, for RegisterTx, its writes) go to the shard of the tenant its workflow runs under, and
// while the tenant moves it fails with the retryable ErrTypeTenantMoving.
func TestRegisteredActivitiesFollowTheirTenant(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	for _, p := range s.pools {
		_, err := p.Exec(ctx, "CREATE TABLE ledger (tenant text, order_id text)")
		require.NoError(t, err)
	}
	r := s.router(t, time.Nanosecond)
	_, err := s.move("acme", "b", nil).Run(ctx)
	require.NoError(t, err)

	for _, tenant := range []string{"acme", "globex"} {
		out, err := runWorkflow(t, r, tenant)
		require.NoError(t, err)
		require.Equal(t, "charged order-1", out)
	}
	require.Equal(t, 2, s.receipts(t, "b", "acme"))
	require.Equal(t, 2, s.receipts(t, "a", "globex"))
	require.Equal(t, 0, s.receipts(t, "a", "acme"))
	var ledgerB string
	require.NoError(t, s.pools["b"].QueryRow(ctx, "SELECT string_agg(tenant, ',') FROM ledger").Scan(&ledgerB))
	require.Equal(t, "acme", ledgerB, "RegisterTx wrote in the tenant's shard")

	// A move fenced and stopped before its wait ends leaves the tenant moving.
	m := s.move("globex", "b", nil)
	m.MaxStale = time.Hour
	stopped, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = m.Run(stopped)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = runWorkflow(t, r, "globex")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.Equal(t, shard.ErrTypeTenantMoving, appErr.Type())
	require.False(t, appErr.NonRetryable())
}
