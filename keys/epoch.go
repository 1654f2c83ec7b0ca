package keys

import (
	"cmp"
	"fmt"

	"go.temporal.io/sdk/workflow"
)

// How a run tells a workflow retry from a Continue-As-New or a cron run, so that workflow-scope
// keys survive Reset and retry and are new per Continue-As-New and per cron run.
//
// A workflow-scope ID names the run's epoch: the identity that a run shares with the runs that
// repeat it (Resets, retries) and with no other. What Temporal gives each kind of run, as observed
// on the server (and tested on the dev server by this package's tests):
//
//	                   Attempt  FirstRunID      OriginalRunID  started header
//	first run          1        its run ID      its run ID     the client's
//	Reset of a run     same     same            same           same (the history is copied)
//	workflow retry     n+1      same            new            copied from the retried run
//	Continue-As-New    1        same            new            written by the CAN command
//	cron run           1        same            new            copied from the previous run
//
// So:
//   - a run that Continue-As-New started carries its epoch in headerEpoch, which this package's
//     interceptor writes on the Continue-As-New command: "can:" and the continuing run's
//     OriginalRunID (one Continue-As-New per run; stable under Reset). Its retries and Resets
//     copy the header, and so the epoch;
//   - any other run of a workflow without a cron schedule has the chain's FirstRunID as its epoch:
//     the first run's ID, kept by Reset and by retries;
//   - a cron run's epoch is its own OriginalRunID (kept by Reset). A retry of a cron run copies
//     the header and the FirstRunID that every cron run shares, and nothing names the cron run
//     it retries: the epoch is unknown, and the workflow scope refuses to key its activities
//     (ErrNoIdentity) rather than give them new keys. Key such steps with WithID (say, the cron
//     slot's business date) or WithRunScope.
//
// A run that Continue-As-New started without the header (its predecessor ran on a worker without
// this interceptor) would share the first run's epoch; it is refused too.

// epochState is a run's epoch, or why it has none.
type epochState struct {
	epoch   string
	refusal string
}

func epochOf(info *workflow.Info, header string) epochState {
	switch {
	case info.CronSchedule != "" && info.Attempt > 1:
		return epochState{refusal: "this run retries a cron run, and Temporal gives a retried cron run no way to name the run it retries, so the workflow scope cannot key it as that run's retry; key the step with keys.WithID or keys.WithRunScope"}
	case info.CronSchedule != "":
		return epochState{epoch: cmp.Or(info.OriginalRunID, info.WorkflowExecution.RunID)}
	case header != "":
		return epochState{epoch: header}
	case info.ContinuedExecutionRunID != "" && info.Attempt <= 1:
		return epochState{refusal: fmt.Sprintf("this run continued as new from run %s without tempotent's epoch header (that run's worker lacked the interceptor), so its keys cannot be told from the first run's; install the interceptor on every workflow worker", info.ContinuedExecutionRunID)}
	}
	// Servers always set FirstRunID and OriginalRunID; Temporal's test environment sets neither.
	return epochState{epoch: cmp.Or(info.FirstRunID, info.OriginalRunID, info.WorkflowExecution.RunID)}
}

// nextEpoch is the epoch of the run that the running one continues as new into.
func nextEpoch(info *workflow.Info) string {
	return "can:" + cmp.Or(info.OriginalRunID, info.WorkflowExecution.RunID)
}
