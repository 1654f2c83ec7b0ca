package saga_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/keys"
)

// TestReplayRecordedHistories replays histories recorded on a real Temporal server against the
// current workflow code: a change that makes the saga schedule other commands on replay (a
// nondeterminism error) fails here before it fails in production. Re-record them with
// `TEMPOTENT_RECORD_HISTORIES=1 go test -run TestRecordHistories ./saga/` after an intended
// change.
//
// payment-cancel-fails-v0 is not re-recorded: the version before sequential compensation went on
// after a failure recorded it (the cancel-shipment compensation fails for good, and the release
// and the refund are skipped), and it stays to prove that such histories still replay as they
// were recorded (workflow.GetVersion "tempotent.saga.continue-after-failure"). Without the
// version check, its replay schedules the release and fails as nondeterministic.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.history.json")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			replayer, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
				Interceptors: []interceptor.WorkerInterceptor{keys.NewInterceptor()},
			})
			require.NoError(t, err)
			replayer.RegisterWorkflow(paymentSaga)
			replayer.RegisterWorkflow(parallelSaga)
			require.NoError(t, replayer.ReplayWorkflowHistoryFromJSONFile(nil, file))
		})
	}
}

// TestRecordHistories runs the sagas on the Temporal dev server (bin/temporal, which
// `make bin/temporal` installs) and writes their histories to testdata.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("TEMPOTENT_RECORD_HISTORIES") == "" {
		t.Skip("records histories only when TEMPOTENT_RECORD_HISTORIES is set")
	}
	ctx := context.Background()
	c := devserver.ForTest(t, "../bin/temporal", client.Options{})

	h := newHarness(t)
	h.fail = func(name string, o order, _ int32) error {
		if (o.ID == "o-compensated" && name == "Ship") || (o.ID == "o-parallel" && name == "Reserve") {
			return temporal.NewNonRetryableApplicationError(name+" refused", "Declined", nil)
		}
		return nil
	}
	w := worker.New(c, "saga-histories", worker.Options{Interceptors: []interceptor.WorkerInterceptor{h.interceptor()}})
	h.register(w)
	w.RegisterWorkflow(paymentSaga)
	w.RegisterWorkflow(parallelSaga)
	require.NoError(t, w.Start())
	defer w.Stop()

	for _, run := range []struct {
		name string
		wf   any
		o    order
	}{
		{"payment-completed", paymentSaga, order{ID: "o-completed", Amount: 100}},
		{"payment-compensated", paymentSaga, order{ID: "o-compensated", Amount: 100}},
		{"parallel-forward", parallelSaga, order{ID: "o-parallel", Amount: 100}},
	} {
		wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: run.name, TaskQueue: "saga-histories"}, run.wf, run.o)
		require.NoError(t, err)
		require.NoError(t, wr.Get(ctx, nil))
		hist := &historypb.History{}
		iter := c.GetWorkflowHistory(ctx, wr.GetID(), wr.GetRunID(), false, 0)
		for iter.HasNext() {
			ev, err := iter.Next()
			require.NoError(t, err)
			hist.Events = append(hist.Events, ev)
		}
		raw, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("testdata", run.name+".history.json"), raw, 0o644))
		t.Logf("%s: %d events", run.name, len(hist.Events))
	}
}
