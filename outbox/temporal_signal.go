package outbox

import (
	"cmp"
	"context"
	"errors"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
)

// Signal is what SignalWorkflow and SignalWithStartWorkflow send: the route's payload with the
// message ID and tenant. Temporal does not deduplicate signals, so a repeated delivery reaches the
// workflow again; the workflow drops it by ID with a SignalDedup (ReceiveSignal does both). A
// workflow that uses the payload without checking the ID may process an event twice.
//
// The publisher sends Signal[any]; the workflow receives Signal[T] with its own payload type (the
// data converter's JSON carries one into the other).
type Signal[T any] struct {
	// ID is the outbox message ID: the same on every delivery of one message.
	ID string `json:"id"`
	// Tenant is the message's tenant (HeaderTenant), or empty. The workflow's own tenant is
	// keys.TenantFromWorkflow; a workflow that serves one tenant may refuse a signal of another.
	Tenant string `json:"tenant,omitempty"`
	// Payload is what the route gave, encoded by the client's data converter (JSON by
	// default): json.RawMessage(d.Payload) sends a JSON message body as it is.
	Payload T `json:"payload"`
}

// SignalWorkflow signals a running workflow with a Signal carrying Payload and the message ID.
// A workflow that does not exist or has closed is a permanent failure unless SkipClosed is set;
// this includes a repeated delivery after the workflow closed, which the publisher cannot tell
// from a new one. For a workflow that may not have started yet, use SignalWithStartWorkflow.
type SignalWorkflow struct {
	WorkflowID string
	RunID      string // empty: the current run
	SignalName string
	Payload    any
	// SkipClosed counts the message as delivered when the workflow does not exist or has
	// closed.
	SkipClosed bool
}

// SignalWithStartWorkflow signals the workflow Options.ID with a Signal carrying Payload and the
// message ID, starting it first with Workflow and Args if it is not running: an event for a
// workflow that does not exist yet starts it, and the new run gets the signal before its first
// step. Options.ID is required. The publisher sets the conflict policy UseExisting (another is a
// *TargetError) and, when Options leaves it unspecified, the reuse policy RejectDuplicate: a
// workflow that has closed is not started again, and the message is permanent unless
// SkipClosed. With AllowDuplicate (set in Options) a closed workflow starts a new run, which
// gets the signal, including a repeated delivery of one the closed run handled.
type SignalWithStartWorkflow struct {
	Options    client.StartWorkflowOptions
	Workflow   any
	Args       []any
	SignalName string
	Payload    any
	// SkipClosed counts the message as delivered when the workflow has closed and the reuse
	// policy keeps it from starting again.
	SkipClosed bool
}

func signalOf(d Delivery, payload any) Signal[any] {
	return Signal[any]{ID: d.ID, Tenant: d.Headers[HeaderTenant], Payload: payload}
}

func (s SignalWorkflow) deliver(ctx context.Context, c client.Client, d Delivery) error {
	if err := cmp.Or(required("SignalWorkflow", "WorkflowID", s.WorkflowID), required("SignalWorkflow", "SignalName", s.SignalName)); err != nil {
		return err
	}
	err := c.SignalWorkflow(ctx, s.WorkflowID, s.RunID, s.SignalName, signalOf(d, s.Payload))
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return notRunning(err, s.WorkflowID, s.SkipClosed)
	}
	return err
}

func (s SignalWithStartWorkflow) deliver(ctx context.Context, c client.Client, d Delivery) error {
	const target = "SignalWithStartWorkflow"
	opts, err := withStartOptions(target, s.Options, s.Workflow)
	if err = cmp.Or(err, required(target, "SignalName", s.SignalName)); err != nil {
		return err
	}
	_, err = c.SignalWithStartWorkflow(ctx, opts.ID, s.SignalName, signalOf(d, s.Payload), opts, s.Workflow, s.Args...)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return notRunning(err, opts.ID, s.SkipClosed)
	}
	return err
}

// SignalDedupMaxDefault is how many message IDs a SignalDedup remembers by default.
const SignalDedupMaxDefault = 1000

// SignalDedup remembers the message IDs of the signals a workflow has processed, so that it
// processes each once: Temporal does not deduplicate signals, and the outbox delivers at least
// once. Its zero value is ready to use. It lives in workflow code and is deterministic.
//
// It is bounded: past Max IDs it forgets the oldest, so a repeat that arrives after Max newer
// messages is processed again (the dispatcher redelivers soon after a crash; an operator's
// requeue of a dead message can be much later). Pass it to workflow.NewContinueAsNewError as an
// argument and back into the next run: the IDs are exported and travel as JSON.
type SignalDedup struct {
	// Max bounds how many IDs are kept; 0 (or less) is SignalDedupMaxDefault.
	Max int `json:"max,omitempty"`
	// IDs are the remembered IDs, oldest first.
	IDs []string `json:"ids,omitempty"`

	index map[string]struct{} // IDs as a set, rebuilt after decoding
}

// First reports whether id is seen for the first time, and remembers it. The empty ID (a
// signal not sent by TemporalPublisher) cannot be deduplicated: it is always first and never
// remembered.
func (d *SignalDedup) First(id string) bool {
	if id == "" {
		return true
	}
	if d.index == nil {
		d.index = make(map[string]struct{}, len(d.IDs))
		for _, seen := range d.IDs {
			d.index[seen] = struct{}{}
		}
	}
	if _, seen := d.index[id]; seen {
		return false
	}
	d.index[id] = struct{}{}
	d.IDs = append(d.IDs, id)
	limit := d.Max
	if limit <= 0 {
		limit = SignalDedupMaxDefault
	}
	for len(d.IDs) > limit {
		delete(d.index, d.IDs[0])
		d.IDs = d.IDs[1:]
	}
	return true
}

// ReceiveSignal receives Signals from ch until one whose ID seen has not seen arrives, and
// returns it after remembering it: repeated deliveries are dropped. Like ch.Receive it blocks,
// whatever ctx; a workflow that also waits for other things uses a workflow.Selector and calls
// seen.First(s.ID) on each Signal it receives instead.
//
//	var seen outbox.SignalDedup // or the one the previous run passed on
//	for {
//		s := outbox.ReceiveSignal[Event](ctx, workflow.GetSignalChannel(ctx, "event"), &seen)
//		// handle s.Payload: once per message
//	}
func ReceiveSignal[T any](ctx workflow.Context, ch workflow.ReceiveChannel, seen *SignalDedup) Signal[T] {
	for {
		var s Signal[T]
		ch.Receive(ctx, &s)
		if seen.First(s.ID) {
			return s
		}
	}
}
