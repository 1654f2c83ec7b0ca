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

// TemporalPublisher hands messages to Temporal so that a repeated delivery is absorbed: Route
// turns each message into one of five targets, and every target carries the message ID as its
// deduplication key.
//
//   - StartWorkflow: a workflow per message; the workflow ID is derived from the message.
//   - UpdateWorkflow: an update of a running workflow; the update ID is the message ID.
//   - UpdateWithStartWorkflow: the same update, starting the workflow if it is not running.
//   - SignalWorkflow: a signal to a running workflow, as a Signal carrying the message ID.
//   - SignalWithStartWorkflow: the same signal, starting the workflow if it is not running.
//
// Temporal deduplicates workflow IDs and update IDs itself. It does not deduplicate signals: a
// workflow that receives them drops repeats with a SignalDedup (ReceiveSignal), or it may process
// an event twice.
//
// A message with a tenant (the header HeaderTenant, which the webhook intake sets) is published
// under keys.WithTenant on every target, so that a Client whose ContextPropagators include
// keys.TenantPropagator carries it in Temporal headers to the workflow, its updates and its
// activities. A Client built by the SDK without that propagator would drop the tenant: such a
// message fails with ErrNoTenantPropagator (permanent) instead.
type TemporalPublisher struct {
	Client client.Client
	// Route says what each message becomes. An error from it is permanent (the message is
	// parked as dead), and so is a target missing a required field (a *TargetError).
	Route func(Delivery) (TemporalTarget, error)
}

var _ Publisher = (*TemporalPublisher)(nil)

// TemporalTarget is what a message becomes in Temporal: a StartWorkflow, UpdateWorkflow,
// UpdateWithStartWorkflow, SignalWorkflow or SignalWithStartWorkflow.
type TemporalTarget interface {
	deliver(ctx context.Context, c client.Client, d Delivery) error
}

// TargetError is the permanent error for a target that Route returned without a field that
// must be set (a workflow ID, a signal or update name, a workflow) or with a value the publisher
// cannot keep its deduplication promise with. Fix Route, then requeue the message.
type TargetError struct {
	Target string // "SignalWorkflow", …
	Field  string // "WorkflowID", "Options.ID", …
	Reason string // "is empty", …
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("outbox: TemporalPublisher.Route gave a %s whose %s %s; fix the route and requeue the message", e.Target, e.Field, e.Reason)
}

// required returns a permanent *TargetError when value is empty.
func required(target, field, value string) error {
	if value == "" {
		return Permanent(&TargetError{Target: target, Field: field, Reason: "is empty"})
	}
	return nil
}

// StartWorkflow starts a workflow once per message. Options.ID must be derived from the message
// (default: the topic and the message ID); a repeated delivery finds the workflow running
// (conflict policy UseExisting) or closed (reuse policy RejectDuplicate) and starts nothing, for
// as long as the namespace retains the closed workflow. The publisher sets both policies.
type StartWorkflow struct {
	Options  client.StartWorkflowOptions
	Workflow any
	Args     []any
}

// UpdateWorkflow sends an update with the message ID as its update ID to a running workflow:
// Temporal runs an update ID once per workflow run, so a repeated delivery gets the first one's
// outcome. The workflow's update handler records the event; a workflow that continues as new
// starts a new run whose update IDs are fresh, so a handler that must not see an event twice
// across runs carries the IDs it has seen into the next run (a SignalDedup does).
//
// A repeated delivery of an update that the workflow completed before it closed gets that
// outcome (Temporal keeps it with the closed run). Any other update of a workflow that does not
// exist or has closed is a permanent failure (the message is parked as dead, for an operator)
// unless SkipClosed is set, as is an update the workflow rejects or fails. For a workflow that
// may not have started yet, use UpdateWithStartWorkflow.
type UpdateWorkflow struct {
	WorkflowID string
	RunID      string // empty: the current run
	UpdateName string
	Args       []any
	// SkipClosed counts the message as delivered when the workflow does not exist or has
	// closed: for events that only a running workflow wants (a late confirmation of an order
	// that has finished).
	SkipClosed bool
}

// Publish implements Publisher.
func (p *TemporalPublisher) Publish(ctx context.Context, d Delivery) error {
	if p.Client == nil || p.Route == nil {
		return Permanent(errors.New("outbox: TemporalPublisher needs a Client and a Route"))
	}
	target, err := p.Route(d)
	if err != nil {
		return Permanent(err)
	}
	if target == nil {
		return Permanent(fmt.Errorf("outbox: TemporalPublisher.Route gave no target for message %s", d.ID))
	}
	ctx, err = tenantContext(ctx, p.Client, d)
	if err != nil {
		return err
	}
	return target.deliver(ctx, p.Client, d)
}

func (s StartWorkflow) deliver(ctx context.Context, c client.Client, d Delivery) error {
	if s.Workflow == nil {
		return Permanent(&TargetError{Target: "StartWorkflow", Field: "Workflow", Reason: "is nil"})
	}
	if err := required("StartWorkflow", "Options.TaskQueue", s.Options.TaskQueue); err != nil {
		return err
	}
	opts := s.Options
	if opts.ID == "" {
		opts.ID = d.Topic + "/" + d.ID
	}
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	_, err := c.ExecuteWorkflow(ctx, opts, s.Workflow, s.Args...)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil // a closed workflow with this ID: an earlier delivery started it
	}
	return err
}

func (u UpdateWorkflow) deliver(ctx context.Context, c client.Client, d Delivery) error {
	if err := cmp.Or(required("UpdateWorkflow", "WorkflowID", u.WorkflowID), required("UpdateWorkflow", "UpdateName", u.UpdateName)); err != nil {
		return err
	}
	opts := updateOptions(d, u.WorkflowID, u.UpdateName, u.Args)
	opts.RunID = u.RunID
	h, err := c.UpdateWorkflow(ctx, opts)
	if err == nil {
		return updateOutcome(ctx, h.Get(ctx, nil), u.UpdateName, u.WorkflowID)
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return notRunning(err, u.WorkflowID, u.SkipClosed)
	}
	return err
}

// updateOptions is the update of a target: its ID is the message ID, and it is sent and waited
// for until it completes, so that its outcome decides the delivery's.
func updateOptions(d Delivery, workflowID, name string, args []any) client.UpdateWorkflowOptions {
	return client.UpdateWorkflowOptions{
		UpdateID:     d.ID,
		WorkflowID:   workflowID,
		UpdateName:   name,
		Args:         args,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}
}

// notRunning is the outcome of a delivery that found workflowID not running, and not to be
// started again (err says why): delivered with SkipClosed, permanent otherwise.
func notRunning(err error, workflowID string, skipClosed bool) error {
	if skipClosed {
		return nil
	}
	return Permanent(fmt.Errorf("outbox: workflow %s is not running (never started, or closed and not to be started again): %w", workflowID, err))
}

// updateOutcome classifies err, an update's outcome (its handle's Get). The workflow ran the
// update and it failed (a validator rejected it, or its handler returned an error): the same
// update ID gets the same outcome, so that is permanent.
func updateOutcome(ctx context.Context, err error, name, workflowID string) error {
	if err != nil && ctx.Err() == nil && !isTransient(err) {
		return Permanent(fmt.Errorf("outbox: update %s of workflow %s failed: %w", name, workflowID, err))
	}
	return err
}

// isTransient reports whether an error from Temporal is about reaching it rather than about the
// update.
func isTransient(err error) bool {
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	var exhausted *serviceerror.ResourceExhausted
	return errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.As(err, &exhausted) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
