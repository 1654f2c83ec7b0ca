//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/internal/sagamodel"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/saga"
)

// Rows 29 and 30 run sagamodel's payment saga, in a worker inside the test process, on the
// shared dev server: their faults are the provider's (a search that lags its writes; a
// compensation refused until its cause is fixed), which fakepay does not model, and row 30's
// saga compensates again on a signal, which the sample's does not.

// compSettle is the model provider's settle time in these rows: a charge is visible to search
// within it.
const compSettle = 2 * time.Second

// compWorld is a receipts schema, a model provider, and a worker of sagamodel's saga on a task
// queue of its own.
type compWorld struct {
	w      *world // for the history helpers; no fakepay, no worker process
	schema string
	store  *activity.Store
	op     *operator.Client // the operator's, on store's receipts
	p      *sagamodel.Provider
	queue  string
}

func newCompWorld(t *testing.T) *compWorld {
	t.Helper()
	c := &compWorld{w: &world{t: t, temporal: shared}, schema: pgtest.Schema(t), p: sagamodel.NewProvider(),
		queue: fmt.Sprintf("faults-%s-%d", t.Name(), time.Now().UnixNano())}
	var err error
	c.store, err = activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: c.schema})
	require.NoError(t, err)
	require.NoError(t, c.store.Migrate(context.Background()))
	c.op, err = operator.NewClient(pgtest.Pool(t), operator.Config{Schema: c.schema})
	require.NoError(t, err)
	w := worker.New(shared.client, c.queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	require.NoError(t, sagamodel.Register(w, c.store, c.p, compSettle))
	w.RegisterWorkflow(sagamodel.Saga)
	require.NoError(t, w.Start())
	t.Cleanup(func() { c.p.Drain(); w.Stop() })
	return c
}

func (c *compWorld) start(pl sagamodel.Plan) client.WorkflowRun {
	c.w.t.Helper()
	run, err := shared.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: pl.ID, TaskQueue: c.queue}, sagamodel.Saga, pl)
	require.NoError(c.w.t, err)
	return run
}

func (c *compWorld) result(run client.WorkflowRun) saga.State {
	c.w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var st saga.State
	require.NoError(c.w.t, run.Get(ctx, &st))
	return st
}

// Row 29: a refund right after the forward step completed, the provider's search lagging. The
// charge completes, the reservation is declined at once, and the refund (compensations run in
// parallel, so it does not wait for the release) asks the provider before its search shows the
// charge. The charge's receipt is completed, but "no charge" is not final until the charge is
// the settle time old: the refund is retried as ForwardUnsettled, finds the charge, and refunds
// it once.
func TestRow29RefundRightAfterChargeSearchLagging(t *testing.T) {
	c := newCompWorld(t)
	pl := sagamodel.Plan{ID: "row29-" + c.schema, FailAt: "reserve", Lag: compSettle * 3 / 4, Options: saga.Options{Parallel: true}}
	run := c.start(pl)
	st := c.result(run)
	require.Equal(t, saga.StateCompensated, st.Status)
	charged, refunds, nothing := c.p.ChargeOf(st.Steps[0].Token)
	require.True(t, charged)
	require.False(t, nothing, "the refund concluded 'no charge' while the provider's search lagged")
	require.Equal(t, 1, refunds, "the charge was not refunded once")

	refund := activityStarted(t, c.w, run, "Refund")
	require.Greater(t, refund.GetAttempt(), int32(1), "the refund found the charge at once: the search did not lag")
	require.Equal(t, activity.ErrTypeForwardUnsettled, refund.GetLastFailure().GetApplicationFailureInfo().GetType(),
		"the refund was not retried as unsettled")
	r, err := c.op.Receipt(context.Background(), keys.Token(st.Steps[0].CompensationToken))
	require.NoError(t, err)
	require.Equal(t, operator.StatusSucceeded, r.Status)
}

// Row 30: a compensation failed for good, fixed, re-armed by an operator. The carrier declines
// the shipment and rejects its cancellation for good; the release and the refund still run, and
// the saga waits. The operator fixes the cause, re-arms the cancellation's receipt with the
// tempotent command and signals the workflow with the temporal command: the cancellation runs
// again under the same token, nothing else runs again, and the saga ends compensated.
func TestRow30CompensationFailedForGoodRearmed(t *testing.T) {
	c := newCompWorld(t)
	tempotent := filepath.Join(t.TempDir(), "tempotent")
	require.NoError(t, proc.Build(context.Background(), tempotent, "github.com/tempotent/tempotent/cmd/tempotent"))
	pl := sagamodel.Plan{ID: "row30-" + c.schema, FailAt: "ship", Broken: []string{"CancelShipment"}}
	run := c.start(pl)

	var waiting saga.State
	require.Eventually(t, func() bool {
		q, err := shared.client.QueryWorkflow(context.Background(), run.GetID(), run.GetRunID(), saga.QueryTypeDefault)
		return err == nil && q.Get(&waiting) == nil && waiting.Status == saga.StateCompensationFailed
	}, time.Minute, 100*time.Millisecond, "the saga did not wait with a failed compensation: %+v", waiting)
	require.Equal(t, saga.CompensationFailed, waiting.Steps[2].CompensationState)
	require.Equal(t, saga.CompensationCompleted, waiting.Steps[1].CompensationState, "the release waited on the failed cancellation")
	require.Equal(t, saga.CompensationCompleted, waiting.Steps[0].CompensationState, "the refund waited on the failed cancellation")
	require.NoError(t, c.p.RefundRan(pl, waiting.Steps[0].Token))
	failed, err := c.op.Receipt(context.Background(), keys.Token(waiting.Steps[2].CompensationToken))
	require.NoError(t, err)
	require.Equal(t, operator.StatusFailed, failed.Status)
	before := c.p.Calls(pl.ID)

	c.p.Fix(pl.ID) // the carrier's credentials are rotated
	cmd := exec.Command(tempotent, "receipts", "rearm", string(failed.Token), "--reason", "INC-30: carrier credentials rotated", "--by", "oncall")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.URL(), "TEMPOTENT_SCHEMA="+c.schema)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "tempotent receipts rearm: %s", out)
	require.Contains(t, string(out), "re-armed "+string(failed.Token))
	out, err = exec.Command(temporalBin, "workflow", "signal", "--address", shared.addr, "--workflow-id", run.GetID(),
		"--name", sagamodel.CompensateAgain).CombinedOutput()
	require.NoError(t, err, "temporal workflow signal: %s", out)

	st := c.result(run)
	require.Equal(t, saga.StateCompensated, st.Status)
	require.Equal(t, waiting.Steps[2].CompensationToken, st.Steps[2].CompensationToken)
	after, err := c.op.Receipt(context.Background(), failed.Token)
	require.NoError(t, err)
	require.Equal(t, operator.StatusSucceeded, after.Status, "the re-armed cancellation's new outcome was not recorded")
	require.Greater(t, after.Fence, failed.Fence, "the re-armed cancellation was not taken over")
	calls := c.p.Calls(pl.ID)
	require.Greater(t, calls[pl.ID+"/CancelShipment"], before[pl.ID+"/CancelShipment"], "the cancellation did not run again")
	require.Equal(t, before[pl.ID+"/Refund"], calls[pl.ID+"/Refund"], "the completed refund ran again")
	require.Equal(t, before[pl.ID+"/Release"], calls[pl.ID+"/Release"], "the completed release ran again")
	charged, refunds, _ := c.p.ChargeOf(st.Steps[0].Token)
	require.True(t, charged)
	require.Equal(t, 1, refunds)
	audit, err := c.op.Audit(context.Background(), failed.Token)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, operator.AuditRearm, audit[0].Action)
	require.Equal(t, "oncall", audit[0].Actor)
}
