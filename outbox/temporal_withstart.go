package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// UpdateWithStartWorkflow sends an update with the message ID as its update ID, starting the
// workflow Options.ID first if it is not running: an event for a workflow that does not exist yet
// starts it instead of going dead. Options.ID names the workflow and is required (the workflow
// an event belongs to, such as "order-" + the order's ID); Workflow and WorkflowArgs start it.
//
// Deduplication, as for UpdateWorkflow: the update ID is the message ID. The publisher sets the
// conflict policy UseExisting, so a repeated delivery while the workflow runs attaches to it and
// gets the first delivery's outcome (another conflict policy is a *TargetError). The reuse policy
// decides what a delivery finds after the workflow has closed:
//
//   - RejectDuplicate (the default, when Options leaves it unspecified): the closed run is the
//     workflow. A repeated delivery of an update that run completed gets its outcome (Temporal
//     keeps it with the closed run); any other is permanent, unless SkipClosed, which counts it
//     as delivered.
//   - AllowDuplicate (set it in Options): a new message starts a new run, which gets the update.
//     A repeat of an update the closed run completed gets that run's outcome while it is the
//     latest run; once a new run has started, a repeat reaches the new run, whose update IDs
//     are fresh, and runs again there. Choose it where the workflow tolerates that.
//
// An update the workflow rejects or fails is permanent, as for UpdateWorkflow.
type UpdateWithStartWorkflow struct {
	Options      client.StartWorkflowOptions
	Workflow     any
	WorkflowArgs []any
	UpdateName   string
	Args         []any
	// SkipClosed counts the message as delivered when the workflow has closed and the reuse
	// policy keeps it from starting again.
	SkipClosed bool
}

func (u UpdateWithStartWorkflow) deliver(ctx context.Context, c client.Client, d Delivery) error {
	const target = "UpdateWithStartWorkflow"
	opts, err := withStartOptions(target, u.Options, u.Workflow)
	if err = cmp.Or(err, required(target, "UpdateName", u.UpdateName)); err != nil {
		return err
	}
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: c.NewWithStartWorkflowOperation(opts, u.Workflow, u.WorkflowArgs...),
		UpdateOptions:          updateOptions(d, opts.ID, u.UpdateName, u.Args),
	})
	if err == nil {
		return updateOutcome(ctx, h.Get(ctx, nil), u.UpdateName, opts.ID)
	}
	// A repeated delivery of an update that a closed run completed gets that outcome from the
	// server, as UpdateWorkflow does. AlreadyStarted is a new update for a closed workflow that
	// its reuse policy keeps from starting again.
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return notRunning(err, opts.ID, u.SkipClosed)
	}
	return err
}

// withStartOptions checks the options of a with-start target and sets its policies: the conflict
// policy UseExisting, so that a repeated delivery reaches the running workflow instead of failing
// or terminating it, and by default the reuse policy RejectDuplicate, so that it does not start a
// closed workflow again.
func withStartOptions(target string, opts client.StartWorkflowOptions, workflow any) (client.StartWorkflowOptions, error) {
	if err := cmp.Or(required(target, "Options.ID", opts.ID), required(target, "Options.TaskQueue", opts.TaskQueue)); err != nil {
		return opts, err
	}
	if workflow == nil {
		return opts, Permanent(&TargetError{Target: target, Field: "Workflow", Reason: "is nil"})
	}
	switch opts.WorkflowIDConflictPolicy {
	case enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING:
	default:
		return opts, Permanent(&TargetError{Target: target, Field: "Options.WorkflowIDConflictPolicy",
			Reason: fmt.Sprintf("is %s: a repeated delivery must reach the running workflow; leave it unset (UseExisting)", opts.WorkflowIDConflictPolicy)})
	}
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	opts.WorkflowIDReusePolicy = cmp.Or(opts.WorkflowIDReusePolicy, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
	return opts, nil
}
