package keys

import (
	"fmt"
	"strconv"

	"go.temporal.io/sdk/workflow"
)

// Workflow code names the intent of the activities it schedules with these context functions.
// Every name is optional: an activity scheduled with none of them is the next occurrence of a
// step named after its activity type, keyed by the workflow scope.

type (
	stepKey     struct{}
	idKey       struct{}
	runScopeKey struct{}
	pinnedKey   struct{}
	runKey      struct{}
	updateKey   struct{}
)

// WithStep names the step that the activities scheduled with the returned context perform. The
// step name is the key's operation and, with the occurrence counted in this run, part of its ID:
// name steps after the business intent ("charge", "reserve-stock") rather than the code, so that
// renaming an activity or refactoring the workflow keeps its keys. When the same step is
// scheduled more than once (a loop), each occurrence gets its own key — "charge#1", "charge#2" —
// in the deterministic order that workflow code schedules them.
//
// Named on a context that StepKey or WithCompensation returned, the step replaces their key: the
// activity gets the key WithStep gives it, as if they had not been called.
func WithStep(ctx workflow.Context, name string) workflow.Context {
	return unpin(workflow.WithValue(ctx, stepKey{}, name))
}

// WithID gives the activities scheduled with the returned context an explicit business key, such
// as "order-123": the same operation (the step name, or the activity type) and ID from any
// workflow, any run, is the same intent, so a second checkout of order 123 replays the first
// one's charge. The key's ID is the id tagged "explicit:" so it never equals a derived one; id
// must be 1 to MaxIDLen bytes of printable UTF-8, or the activity fails to schedule with an
// *InvalidKeyError. Like WithStep, it replaces a key that StepKey or WithCompensation pinned on ctx.
func WithID(ctx workflow.Context, id string) workflow.Context {
	return unpin(workflow.WithValue(ctx, idKey{}, id))
}

// WithRunScope keys the activities scheduled with the returned context by this run alone, as
// Temporal's documentation advises (run ID and the activity's place in the run): stable across the
// activity's retries, new after a Reset, a workflow retry or a Continue-As-New. Use it for effects
// that a reset workflow should perform again. WithID, when also set, wins: an explicit business
// key is the same intent in every run. Like WithStep, it replaces a key that StepKey or
// WithCompensation pinned on ctx.
func WithRunScope(ctx workflow.Context) workflow.Context {
	return unpin(workflow.WithValue(ctx, runScopeKey{}, true))
}

// StepKey decides now the key of the next activity scheduled with the returned context — the key
// it would get from WithStep(ctx, step), honouring WithID, WithRunScope and an update handler's
// scope on ctx — and returns it, so that workflow code can hold it (the saga package registers
// compensations under it before the step runs).
//
// The returned context gives this key to exactly one activity: the first activity or local
// activity scheduled with it. The usual code shadows ctx, so it must be safe to keep using:
//
//	ctx, k, err := keys.StepKey(ctx, "charge")
//	workflow.ExecuteActivity(ctx, Charge, req)                      // charge, under k
//	workflow.ExecuteActivity(keys.WithStep(ctx, "ship"), Ship, req) // ship#1, its own key
//
// A step, ID or run scope named on the returned context (WithStep, WithID, WithRunScope) replaces
// the key, before its use or after, as if StepKey had not been called. An activity scheduled with
// the returned context as it is once the key was used fails to schedule with ErrPinnedContext —
// even another "charge": a second charge is a new intent (call StepKey again for the step's next
// occurrence), and a retry of the same one is the activity's RetryPolicy, which keeps the key. A
// child workflow started with the returned context before the key was used fails with
// ErrPinnedContext too: a child keys its own activities in its own scope, never under k. Replay
// gives the key to the same activity, because workflow code schedules in a deterministic order.
func StepKey(ctx workflow.Context, step string) (workflow.Context, Key, error) {
	in, err := decide(WithStep(ctx, step), step)
	if err == nil && in.Refused != "" {
		err = fmt.Errorf("step %s: %w: %s", step, ErrNoIdentity, in.Refused)
	}
	if err != nil {
		return ctx, Key{}, err
	}
	k := workflowKey(ctx, in)
	if err := k.Validate(); err != nil {
		return ctx, Key{}, err
	}
	return workflow.WithValue(ctx, pinnedKey{}, &pin{in: in, by: "keys.StepKey(ctx, " + strconv.Quote(step) + ")"}), k, nil
}

// WithCompensation returns forward's compensation key for the compensation named name (see
// Key.Compensation), with a context that gives it to the activity scheduled with it, together
// with forward's key: in the activity, CompensatedKeyFrom returns forward's key and
// CompensatesFrom its token, so the compensation can find the forward effect at the downstream
// even when the forward activity's result was never seen. The returned context keys exactly one
// activity, as StepKey's does: a second one scheduled with it fails with ErrPinnedContext.
func WithCompensation(ctx workflow.Context, forward Key, name string) (workflow.Context, Key, error) {
	k, err := forward.Compensation(name)
	if err != nil {
		return ctx, Key{}, err
	}
	in := intent{Operation: k.Operation, ID: k.ID, Compensates: &forwardStep{Operation: forward.Operation, ID: forward.ID}}
	return workflow.WithValue(ctx, pinnedKey{}, &pin{in: in, by: "keys.WithCompensation(ctx, " + forward.Operation + ", " + strconv.Quote(name) + ")"}), k, nil
}

// pin is a key that StepKey or WithCompensation decided for the next activity scheduled with
// their context. It is used once: usedBy names the activity type that took it. A pin lives in the
// workflow's memory only and every replay makes it again, consumed by the same activity.
type pin struct {
	in     intent
	by     string // the call that pinned it, for messages
	usedBy string
}

// unpin returns ctx without the key that StepKey or WithCompensation pinned on it.
func unpin(ctx workflow.Context) workflow.Context {
	if p, _ := ctx.Value(pinnedKey{}).(*pin); p == nil {
		return ctx
	}
	return workflow.WithValue(ctx, pinnedKey{}, (*pin)(nil))
}

// take gives p's key to activityType, once.
func (p *pin) take(activityType string) (intent, error) {
	if p.usedBy != "" {
		return intent{}, fmt.Errorf("%w: activity %s was scheduled with the context that %s returned, whose key (%s %s) activity %s took: that context keys exactly one activity; call keys.StepKey again for the step's next occurrence, or name the activity with keys.WithStep or keys.WithID (a retry of the same intent is the activity's RetryPolicy, which keeps the key)",
			ErrPinnedContext, activityType, p.by, p.in.Operation, p.in.ID, p.usedBy)
	}
	p.usedBy = activityType
	return p.in, nil
}

func workflowKey(ctx workflow.Context, in intent) Key {
	return Key{Namespace: workflow.GetInfo(ctx).Namespace, Tenant: TenantFromWorkflow(ctx), Operation: in.Operation, ID: in.ID}
}

// decide returns the intent of the next activity of type activityType scheduled with ctx. It
// counts the step's occurrence, so it is called once per scheduled activity: by the interceptor
// for each one, unless StepKey or WithCompensation decided it already: then it takes their key,
// once.
func decide(ctx workflow.Context, activityType string) (intent, error) {
	if p, _ := ctx.Value(pinnedKey{}).(*pin); p != nil {
		return p.take(activityType)
	}
	return decideNamed(ctx, activityType, "")
}

// childEpoch returns the epoch of a child workflow of type childType started with ctx (see
// epoch.go): the identity in the parent that an activity of that type would have, its
// occurrences counted apart from the activities'; or, when the parent was refused that
// identity, why. Both are empty when the parent has nothing to give (no interceptor, a malformed
// name): the child then keys by its own first run.
func childEpoch(ctx workflow.Context, childType string) (epoch, refused string) {
	in, err := decideNamed(ctx, childType, "child/")
	switch {
	case err != nil:
		return "", ""
	case in.Refused != "":
		return "", in.Refused
	}
	return joinParts("child", in.Operation, in.ID), ""
}

// decideNamed is decide for a context whose key was not pinned; counter prefixes the
// occurrence counters, so that child workflows are counted apart from activities.
func decideNamed(ctx workflow.Context, activityType, counter string) (intent, error) {
	run, ok := ctx.Value(runKey{}).(*runState)
	if !ok {
		return intent{}, fmt.Errorf("%w: the workflow runs without tempotent's interceptor; install activity.NewInterceptor() (or keys.NewInterceptor()) on the worker that runs the workflow", ErrNoIdentity)
	}
	step, _ := ctx.Value(stepKey{}).(string)
	if step == "" {
		step = activityType
	}
	if err := validateStep(step); err != nil {
		return intent{}, err
	}
	if id, _ := ctx.Value(idKey{}).(string); id != "" {
		if err := validateID(id); err != nil {
			return intent{}, err
		}
		return intent{Operation: step, ID: explicitScopeID(id)}, nil
	}
	info := workflow.GetInfo(ctx)
	update, _ := ctx.Value(updateKey{}).(string)
	switch {
	case ctx.Value(runScopeKey{}) != nil:
		return intent{Operation: step, ID: runScopeID(info.WorkflowExecution.ID, info.WorkflowExecution.RunID, run.occurrence(counter+"run", step))}, nil
	case update != "":
		return intent{Operation: step, ID: updateScopeID(info.WorkflowExecution.ID, update, run.occurrence(counter+"update/"+update, step))}, nil
	}
	if run.epoch.refusal != "" {
		return intent{Operation: step, Refused: run.epoch.refusal}, nil
	}
	return intent{Operation: step, ID: workflowScopeID(info.WorkflowExecution.ID, run.epoch.epoch, run.occurrence(counter+"workflow", step))}, nil
}

// runState is what the interceptor keeps for one workflow execution: its epoch and how many
// times each step has been scheduled. Every replay rebuilds it identically, because workflow code
// schedules activities in a deterministic order.
type runState struct {
	epoch       epochState
	occurrences map[string]int
}

// occurrence counts one more occurrence of step among the counter's, and spells it "step#n".
func (r *runState) occurrence(counter, step string) string {
	c := counter + "\x00" + step
	r.occurrences[c]++
	return step + "#" + strconv.Itoa(r.occurrences[c])
}
