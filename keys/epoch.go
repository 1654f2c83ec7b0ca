package keys

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"

	"go.temporal.io/sdk/temporal"
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
//	child's first run  1        its run ID      its run ID     written by the parent's start
//
// So:
//   - a run that Continue-As-New started carries its epoch in headerEpoch, which this package's
//     interceptor writes on the Continue-As-New command: "can:" and the continuing run's
//     OriginalRunID (one Continue-As-New per run; stable under Reset). Its retries and Resets
//     copy the header, and so the epoch;
//   - a child workflow's first run carries in headerEpoch the epoch its parent's interceptor
//     wrote on the start: "child:", the child's step (WithStep on the start's context, else its
//     workflow type) and the ID in the parent that an activity so named would get there
//     (workflow, run or update scope, or WithID's), its occurrences counted apart from the
//     activities'. The parent's Resets and retries start the child again with the same epoch, so
//     a child started again under the same workflow ID replays its effects; its own retries and
//     Resets copy the header. A parent refused its own epoch writes why in headerEpochRefused
//     instead, and the child's workflow scope is refused as the parent's is. A parent without
//     the interceptor writes neither, and the child keys by its own FirstRunID: new keys when
//     the parent starts it again;
//   - any other run of a workflow without a cron schedule has the chain's FirstRunID as its epoch:
//     the first run's ID, kept by Reset and by retries;
//   - a cron run's epoch is its own OriginalRunID (kept by Reset). A retry of a cron run copies
//     the header and the FirstRunID that every cron run shares, and nothing names the cron run
//     it retries: the epoch is unknown, and the workflow scope refuses to key its activities
//     (ErrNoIdentity) rather than give them new keys. Key such steps with WithID (say, the cron
//     slot's business date) or WithRunScope.
//
// A run that Continue-As-New started without the header (its predecessor ran on a worker without
// this interceptor) would share the first run's epoch; it is refused too, and so is every retry
// of it. A retry copies the header (none) and the FirstRunID, and its ContinuedExecutionRunID
// names the attempt it retries, as a retry of the first run's does: nothing the server gives it
// tells the two apart. The one thing a run hands its retry is its failure, which the retry reads
// as workflow.GetLastError: the interceptor marks the failure of a refused run (refusedMark in its
// details), and a retry whose last error carries the mark is refused. A refused run that fails
// without passing its error through the interceptor — it times out (WorkflowRunTimeout), or a
// panic fails it — hands on no mark, and its retry falls back to the FirstRunID: install the
// interceptor on every workflow worker.

// refusedMark is the detail that marks the failure of a run refused its epoch.
const refusedMark = "tempotent: this run was refused its workflow-scope keys, and so is its retry"

// epochState is a run's epoch, or why it has none.
type epochState struct {
	epoch   string
	refusal string
	// mark says that the run's failure must carry refusedMark, for its retries.
	mark bool
}

// epochHeader is what the start of a run says of its epoch: the epoch that Continue-As-New or a
// parent wrote (headerEpoch), or why a parent had none to give (headerEpochRefused).
type epochHeader struct{ epoch, refused string }

// epochOf decides the epoch of the run that info describes, from the epoch headers of its start
// and the failure of the attempt it retries (workflow.GetLastError).
func epochOf(info *workflow.Info, header epochHeader, lastErr error) epochState {
	switch {
	case info.CronSchedule != "" && info.Attempt > 1:
		return epochState{refusal: "this run retries a cron run, and Temporal gives a retried cron run no way to name the run it retries, so the workflow scope cannot key it as that run's retry; key the step with keys.WithID or keys.WithRunScope"}
	case info.CronSchedule != "":
		return epochState{epoch: cmp.Or(info.OriginalRunID, info.WorkflowExecution.RunID)}
	case header.refused != "":
		return epochState{refusal: "its parent workflow was refused its workflow-scope keys, so it has no epoch to give this child that tells this start of it from another: " + header.refused}
	case header.epoch != "":
		return epochState{epoch: header.epoch}
	case info.ContinuedExecutionRunID != "" && info.Attempt <= 1:
		return epochState{mark: true, refusal: fmt.Sprintf("this run continued as new from run %s without tempotent's epoch header (that run's worker lacked the interceptor), so its keys cannot be told from the first run's; install the interceptor on every workflow worker", info.ContinuedExecutionRunID)}
	case info.ContinuedExecutionRunID != "" && markedRefused(lastErr):
		return epochState{mark: true, refusal: fmt.Sprintf("this run retries run %s, which continued as new without tempotent's epoch header (its predecessor's worker lacked the interceptor) and was refused its keys, so its keys cannot be told from the first run's; install the interceptor on every workflow worker", info.ContinuedExecutionRunID)}
	}
	// Servers always set FirstRunID and OriginalRunID; Temporal's test environment sets neither.
	return epochState{epoch: cmp.Or(info.FirstRunID, info.OriginalRunID, info.WorkflowExecution.RunID)}
}

// markRefused returns the error that a refused run fails with, marked for its retries (see
// epochOf). The mark changes neither what the server retries nor how: the marked error keeps
// the type, retryability, retry delay and message of err, which it wraps (an activity's, a child
// workflow's or a Nexus operation's error, which has no type, gets the type ""). Only the details of an
// *temporal.ApplicationError that err was are replaced, by the mark: read them from its cause.
// Errors whose kind decides the retry (timeout, cancellation, termination, panic) and
// Continue-As-New pass unmarked.
func markRefused(err error) error {
	if err == nil || workflow.IsContinueAsNewError(err) {
		return err
	}
	opts := temporal.ApplicationErrorOptions{Cause: err, Details: []any{refusedMark}}
	msg, typ := err.Error(), errType(err)
	switch e := err.(type) {
	case *temporal.ApplicationError:
		msg, typ = e.Message(), e.Type()
		opts.NonRetryable, opts.NextRetryDelay, opts.Category = e.NonRetryable(), e.NextRetryDelay(), e.Category()
	case *temporal.TimeoutError, *temporal.CanceledError, *temporal.TerminatedError, *temporal.PanicError:
		return err
	case *temporal.ActivityError, *temporal.ChildWorkflowExecutionError, *temporal.NexusOperationError:
		// Their failure has no application type, and the server retries it whatever the retry
		// policy's non-retryable types name: so does it with the type "", which none names.
		typ = ""
	}
	return temporal.NewApplicationErrorWithOptions(msg, typ, opts)
}

// markedRefused reports whether err, the failure of the attempt that this run retries, carries
// refusedMark.
func markedRefused(err error) bool {
	e, ok := err.(*temporal.ApplicationError)
	var mark string
	return ok && e.HasDetails() && e.Details(&mark) == nil && mark == refusedMark
}

// errType is the type the SDK gives a Go error that is not an *temporal.ApplicationError when it
// fails a workflow with it: its type's name, or "" for errors.New's.
func errType(err error) string {
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(errors.New("")).Elem() {
		return ""
	}
	return t.Name()
}

// nextEpoch is the epoch of the run that the running one continues as new into.
func nextEpoch(info *workflow.Info) string {
	return "can:" + cmp.Or(info.OriginalRunID, info.WorkflowExecution.RunID)
}
