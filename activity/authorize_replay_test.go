package activity_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
)

// loseFirstReport lets an activity's first attempt run to the end, its outcome recorded, and then
// loses its report to Temporal, as a worker that dies just then would: Temporal retries it.
// Its between runs after the first attempt and before its retry.
type loseFirstReport struct {
	interceptor.WorkerInterceptorBase
	between func()
}

func (l *loseFirstReport) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &loseFirstReportInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, between: l.between}
}

type loseFirstReportInbound struct {
	interceptor.ActivityInboundInterceptorBase
	between func()
}

var _ interceptor.ActivityInboundInterceptor = (*loseFirstReportInbound)(nil)

func (a *loseFirstReportInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	out, err := a.Next.ExecuteActivity(ctx, in)
	if sdkactivity.GetInfo(ctx).Attempt == 1 {
		a.between()
		return nil, errors.New("the worker died before it reported the activity's outcome")
	}
	return out, err
}

// TestRevokedTenantIsRefusedTheStoredResult is issue 41's test: a workflow's activity completes
// and records its charge, the worker dies before Temporal hears of it, the tenant's access is
// revoked, and Temporal's retry is refused: not handed the stored charge, and nothing changed.
func TestRevokedTenantIsRefusedTheStoredResult(t *testing.T) {
	t.Parallel()
	access := newACL("acme")
	s, schema := setup(t, &activity.Config{Authorize: access.hook})
	p := newProvider()
	var recorded string // the receipt as the first attempt left it
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.SetContextPropagators([]workflow.ContextPropagator{keys.TenantPropagator()})
	env.SetHeader(tenantHeader(t, "acme"))
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor(), &loseFirstReport{between: func() {
		recorded = receiptRows(t, schema)
		access.revoke("acme")
	}}}})
	env.RegisterWorkflow(chargeWorkflow)
	require.NoError(t, activity.Register(env, s, "Charge", p.charge, activity.Options{DownstreamDeduplicates: true}))

	env.ExecuteWorkflow(chargeWorkflow, ChargeRequest{Order: "order-1", Amount: 100})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	calls, charges := p.counts()
	require.Equal(t, 1, calls, "the first attempt did not run, or the retry ran again")
	require.Equal(t, 1, charges)
	var charge Charge
	for _, c := range p.charges {
		charge = c
	}
	requireRefused(t, err, charge.ID, "the retry after the revocation")
	require.Contains(t, recorded, `"state":"completed"`, "the first attempt did not record its outcome")
	require.Equal(t, recorded, receiptRows(t, schema), "the refused retry changed the receipt")
	require.Equal(t, int32(2), access.asked.Load(), "the hook was not asked at the first run and at the retry")
}

// TestAuthorizationExplorer drives seeded random sequences of grant, revoke, attempt and crash
// (an attempt that dies after its effect, before it records anything) against one intent on the
// real store, and checks them against a model: an attempt is handed the charge exactly when its
// tenant is authorized at that moment; a refused one is handed nothing and leaves the receipt as
// it was; and the charge is made at most once, whatever the order.
func TestAuthorizationExplorer(t *testing.T) {
	t.Parallel()
	seen := map[string]int{} // what the sequences exercised, over every seed
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("Seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 41))
			access := newACL()
			s, schema := setup(t, &activity.Config{Authorize: access.hook})
			p := newProvider()
			ctx := keys.WithTenant(context.Background(), "acme")
			c := call(t, "order-1", ChargeRequest{Order: "order-1", Amount: 100})
			c.DownstreamDeduplicates = true
			c.Lease = 50 * time.Millisecond // a crashed attempt's lease ends soon
			charge := func(ctx context.Context) (Charge, error) {
				return p.charge(ctx, ChargeRequest{Order: "order-1", Amount: 100})
			}

			authorized := false // the model: is acme granted now?
			var handed *Charge  // the charge the model has seen handed out
			for step := range 30 {
				op := []string{"grant", "revoke", "attempt", "attempt", "crash"}[rng.IntN(5)]
				where := fmt.Sprintf("seed %d step %d (%s, authorized %v)", seed, step, op, authorized)
				before := receiptRows(t, schema)
				switch op {
				case "grant":
					access.grant("acme")
					authorized = true
				case "revoke":
					access.revoke("acme")
					authorized = false
				case "crash":
					receipttest.CrashAfterEffect(ctx, s, c, func(tok keys.Token) {
						_, _ = charge(keys.WithToken(ctx, tok))
					})
					if !authorized {
						require.Equal(t, before, receiptRows(t, schema), "%s: a refused attempt wrote", where)
					} else if handed == nil {
						seen["crash before any result"]++
					}
				case "attempt":
					out, err := receipttest.DoUntilDone(ctx, s, c, charge)
					if !authorized {
						requireRefused(t, err, "ch_", where)
						if handed != nil {
							seen["refused replay"]++
						} else {
							seen["refused first run"]++
						}
						require.Zero(t, out, "%s: a refused attempt was handed a result", where)
						require.Equal(t, before, receiptRows(t, schema), "%s: a refused attempt wrote", where)
						break
					}
					require.NoError(t, err, where)
					if handed != nil {
						require.Equal(t, *handed, out, "%s: two attempts were handed different charges", where)
						seen["replay"]++
					}
					handed = &out
				}
				_, charges := p.counts()
				require.LessOrEqual(t, charges, 1, "%s: the charge was made twice", where)
			}
		})
	}
	for _, what := range []string{"refused first run", "refused replay", "replay", "crash before any result"} {
		require.Positive(t, seen[what], "no sequence exercised a %s: %v", what, seen)
	}
	t.Logf("exercised: %v", seen)
}
