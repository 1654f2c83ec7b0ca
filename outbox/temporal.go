package outbox

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// TemporalPublisher hands messages to Temporal so that Temporal's own deduplication absorbs a
// repeated delivery: Route turns each message into a StartWorkflow (the workflow ID is the
// deduplication key) or an UpdateWorkflow (the update ID is the message ID).
type TemporalPublisher struct {
	Client client.Client
	// Route says what each message becomes. An error from it is permanent (the message is
	// parked as dead).
	Route func(Delivery) (TemporalTarget, error)
}

var _ Publisher = (*TemporalPublisher)(nil)

// TemporalTarget is what a message becomes in Temporal: a StartWorkflow or an UpdateWorkflow.
type TemporalTarget interface {
	deliver(ctx context.Context, c client.Client, d Delivery) error
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
// across runs carries the IDs it has seen into the next run.
//
// A workflow that does not exist or has closed is a permanent failure (the message is parked as
// dead, for an operator) unless SkipClosed is set, as is an update the workflow rejects or fails.
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
	return target.deliver(ctx, p.Client, d)
}

func (s StartWorkflow) deliver(ctx context.Context, c client.Client, d Delivery) error {
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
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID:     d.ID,
		WorkflowID:   u.WorkflowID,
		RunID:        u.RunID,
		UpdateName:   u.UpdateName,
		Args:         u.Args,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
		if err != nil && ctx.Err() == nil && !isTransient(err) {
			// The workflow ran the update and it failed (a validator rejected it, or its
			// handler returned an error): the same update ID gets the same outcome.
			return Permanent(fmt.Errorf("outbox: update %s of workflow %s failed: %w", u.UpdateName, u.WorkflowID, err))
		}
		return err
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		if u.SkipClosed {
			return nil
		}
		return Permanent(fmt.Errorf("outbox: workflow %s is not running (never started, or closed): %w", u.WorkflowID, err))
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
