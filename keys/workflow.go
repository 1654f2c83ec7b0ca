package keys

import (
	"fmt"
	"strconv"

	"go.temporal.io/sdk/workflow"
)

// StepKey reserves the next occurrence of step in the running workflow and returns its
// ScopeWorkflow key, with a context that pins that key on the activity scheduled with it. The
// key's operation is the step name, so it does not change when the activity is renamed; its ID
// is the ScopeWorkflow ID of workflow ID + OriginalRunID + "step#n"
// ("wf:order-123/<OriginalRunID>/charge#1"), so it survives Reset and every replay derives the
// same one. It is the very ID that the activity side derives for the same occurrence of a step
// scheduled with WithStep: occurrences are counted together with WithStep's, so a name means one
// step however it is scheduled.
//
// It needs Interceptor (or the activity package's interceptor) on the worker that runs the
// workflow, and returns an error matching ErrNoIdentity without it.
func StepKey(ctx workflow.Context, step string) (workflow.Context, Key, error) {
	if err := ValidateStep(step); err != nil {
		return ctx, Key{}, err
	}
	occurrences, ok := ctx.Value(occurrencesKey{}).(map[string]int)
	if !ok {
		return ctx, Key{}, fmt.Errorf("step %s: %w: install keys.Interceptor (or the activity package's interceptor) on the worker that runs this workflow", step, ErrNoIdentity)
	}
	occurrences[step]++
	info := workflow.GetInfo(ctx)
	origin := info.OriginalRunID
	if origin == "" {
		origin = info.WorkflowExecution.RunID // as the interceptor does; see writeHeader
	}
	k := Key{
		Namespace: info.Namespace,
		Tenant:    TenantFromWorkflow(ctx),
		Operation: step,
		ID:        workflowScopeID(info.WorkflowExecution.ID, origin, step+"#"+strconv.Itoa(occurrences[step])),
	}
	if err := k.Validate(); err != nil {
		return ctx, Key{}, err
	}
	return workflow.WithValue(ctx, pinnedKey{}, pinned{key: k}), k, nil
}

// WithCompensation returns forward's compensation key for the compensation named name (see
// Key.Compensation), with a context that pins it on the activity scheduled with it and carries
// forward's token and key to it (CompensatesFrom, CompensatedKeyFrom).
func WithCompensation(ctx workflow.Context, forward Key, name string) (workflow.Context, Key, error) {
	k, err := forward.Compensation(name)
	if err != nil {
		return ctx, Key{}, err
	}
	return workflow.WithValue(ctx, pinnedKey{}, pinned{key: k, forward: &forward}), k, nil
}

// ExplicitKey returns the key of a business intent named in workflow code — operation and id,
// such as "charge" and "order-123" — in the workflow's namespace and tenant, with a context that
// pins it on the activity scheduled with it (ScopeExplicit, chosen by the workflow). The key's
// ID is id tagged with its scope, "explicit:order-123", the same as WithID and Options.ID
// derive. The same operation and id from any workflow is the same intent: a second checkout of
// order 123 replays the first one's charge. Malformed parts, and an id that ValidateID refuses,
// are an *InvalidKeyError, before anything is scheduled.
func ExplicitKey(ctx workflow.Context, operation, id string) (workflow.Context, Key, error) {
	if err := ValidateID(id); err != nil {
		return ctx, Key{}, err
	}
	info := workflow.GetInfo(ctx)
	k := Key{Namespace: info.Namespace, Tenant: TenantFromWorkflow(ctx), Operation: operation, ID: explicitScopeID(id)}
	if err := k.Validate(); err != nil {
		return ctx, Key{}, err
	}
	return workflow.WithValue(ctx, pinnedKey{}, pinned{key: k}), k, nil
}
