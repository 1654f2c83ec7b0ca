package keys

import (
	"cmp"
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
)

// Scope chooses how a key's ID is derived from the activity's identity. Each scope's IDs begin
// with their own tag and ':', and the identity's parts inside are percent-escaped ('%', '/' and
// '#' only) and joined with '/', so that no two identities, of one scope or of two, share an ID.
// A derived ID longer than MaxIDLen becomes "<tag>:sha256:<hex>".
type Scope uint8

const (
	// ScopeWorkflow (the default) keys an activity by workflow ID, the workflow's OriginalRunID
	// and a step name chosen in workflow code (WithStep; the activity type when none is given)
	// with an occurrence counter: "wf:order-123/<OriginalRunID>/charge#1". It survives workflow
	// Reset, which starts a new run with the same OriginalRunID, and differs across
	// Continue-As-New, Retry and Cron runs. It needs the header that Interceptor writes on the
	// workflow side.
	ScopeWorkflow Scope = iota
	// ScopeRun keys an activity by workflow ID, run ID and activity ID, as Temporal's docs advise:
	// "run:order-123/<run ID>/5". It is stable across retry attempts but not across workflow
	// Reset. A standalone activity (started by a client, not a workflow) is keyed by its activity
	// ID and ActivityRunID: "activity:<activity ID>/<activity run ID>".
	ScopeRun
	// ScopeExplicit uses a business key chosen by the caller, such as "order-123/charge", set in
	// workflow code with WithID or ExplicitKey or given as Options.ID. It is stored tagged and
	// otherwise as given, "explicit:order-123/charge", so it never equals a derived ID; it is
	// never hashed, and Key.ID allows MaxKeyIDLen bytes to hold the longest one.
	ScopeExplicit
)

func (s Scope) String() string {
	switch s {
	case ScopeWorkflow:
		return "workflow"
	case ScopeRun:
		return "run"
	case ScopeExplicit:
		return "explicit"
	}
	return fmt.Sprintf("Scope(%d)", uint8(s))
}

// Options says how to derive a key. The zero Options derives a ScopeWorkflow key whose operation
// is the activity type.
type Options struct {
	// Scope chooses the ID's derivation. Default ScopeWorkflow.
	Scope Scope
	// Operation overrides the activity type as the key's operation: give it when the activity
	// may be renamed, or when two activity types perform the same intent.
	Operation string
	// ID is the explicit business key for ScopeExplicit when workflow code did not set one with
	// WithID. An ID set in workflow code wins. It is validated with ValidateID (at most MaxIDLen
	// bytes) and becomes Key.ID with its scope tag: "order-123" is stored as "explicit:order-123".
	ID string
}

// Identity is what a key is derived from: the parts of activity.Info that identify an activity,
// and the values that Interceptor and TenantPropagator carry in headers. IdentityFromActivity
// fills it; tests and tools may build one by hand.
//
// Identity has no Attempt field on purpose: retries must get the same key, and an activity reset
// sets the attempt back to 1.
type Identity struct {
	Namespace       string
	WorkflowID      string
	RunID           string
	OriginalRunID   string // from the header; empty when the workflow side has no Interceptor
	ActivityID      string
	ActivityRunID   string // set only for standalone activities
	ActivityType    string
	IsLocalActivity bool
	Step            string // from the header: step name and occurrence, e.g. "charge#1"
	ExplicitID      string // from the header: set by WithID in workflow code
	Tenant          string // from the header: set by WithTenant where the workflow was started
	// PinnedOperation and PinnedID: a key fixed in workflow code (StepKey, WithCompensation).
	PinnedOperation string
	PinnedID        string
}

// IdentityFromActivity reads the identity of the activity running in ctx. It must be called in an
// activity context; the header values are present when Interceptor (or the activity package's
// interceptor, which includes it) is installed on the worker.
func IdentityFromActivity(ctx context.Context) Identity {
	info := activity.GetInfo(ctx)
	h := headerValuesFrom(ctx)
	return Identity{
		Namespace:       info.Namespace,
		WorkflowID:      info.WorkflowExecution.ID,
		RunID:           info.WorkflowExecution.RunID,
		OriginalRunID:   h.originalRunID,
		ActivityID:      info.ActivityID,
		ActivityRunID:   info.ActivityRunID,
		ActivityType:    info.ActivityType.Name,
		IsLocalActivity: info.IsLocalActivity,
		Step:            h.step,
		ExplicitID:      h.explicitID,
		Tenant:          TenantFrom(ctx),
		PinnedOperation: h.pinnedOperation,
		PinnedID:        h.pinnedID,
	}
}

// FromActivity derives the key of the activity running in ctx. See Derive.
func FromActivity(ctx context.Context, opts Options) (Key, error) {
	return Derive(IdentityFromActivity(ctx), opts)
}

// Derive derives a key from an activity's identity. It never returns a key with an empty or
// shared ID: when the identity lacks what the scope needs, it returns an error matching
// ErrNoIdentity that says what to do; malformed explicit IDs, steps and tenants are an
// *InvalidKeyError. Both are returned before anything is written or called.
//
// A key pinned in workflow code (StepKey, WithCompensation) wins over opts: the workflow named
// the intent, and the activity side must agree with it for compensation keys to line up.
func Derive(id Identity, opts Options) (Key, error) {
	if id.PinnedID != "" || id.PinnedOperation != "" {
		k := Key{Namespace: id.Namespace, Tenant: id.Tenant, Operation: id.PinnedOperation, ID: id.PinnedID}
		if err := k.Validate(); err != nil {
			return Key{}, fmt.Errorf("derive pinned key: %w", err)
		}
		return k, nil
	}
	k := Key{Namespace: id.Namespace, Tenant: id.Tenant, Operation: opts.Operation}
	if k.Operation == "" {
		k.Operation = id.ActivityType
	}
	var err error
	switch opts.Scope {
	case ScopeWorkflow:
		k.ID, err = workflowID(id)
	case ScopeRun:
		k.ID, err = runID(id)
	case ScopeExplicit:
		k.ID, err = explicitID(id, opts)
	default:
		err = fmt.Errorf("%w: unknown scope %v", ErrNoIdentity, opts.Scope)
	}
	if err != nil {
		return Key{}, fmt.Errorf("derive key for %s: %w", k.Operation, err)
	}
	if err := k.Validate(); err != nil {
		return Key{}, fmt.Errorf("derive key for %s: %w", k.Operation, err)
	}
	return k, nil
}

func workflowID(id Identity) (string, error) {
	switch {
	case id.WorkflowID == "":
		return "", fmt.Errorf("%w: the workflow scope needs a workflow, and this activity was started without one; give it an explicit key (ScopeExplicit)", ErrNoIdentity)
	case id.OriginalRunID == "" || id.Step == "":
		return "", fmt.Errorf("%w: the workflow scope needs the OriginalRunID and step headers; install keys.Interceptor (or the activity package's interceptor) on the worker that runs the workflow", ErrNoIdentity)
	}
	return workflowScopeID(id.WorkflowID, id.OriginalRunID, id.Step), nil
}

// explicitID validates the caller's explicit ID as given (so the limit in the error is MaxIDLen,
// the one the caller must meet) and returns it tagged.
func explicitID(id Identity, opts Options) (string, error) {
	raw := cmp.Or(id.ExplicitID, opts.ID)
	if raw == "" {
		return "", fmt.Errorf("%w: the explicit scope needs an ID: set keys.WithID in workflow code or Options.ID", ErrNoIdentity)
	}
	if err := ValidateID(raw); err != nil {
		return "", err
	}
	return explicitScopeID(raw), nil
}

func runID(id Identity) (string, error) {
	switch {
	case id.IsLocalActivity:
		// A local activity retried by timer is scheduled again under a new activity ID.
		return "", fmt.Errorf("%w: a local activity's ID changes when it is retried by timer; use the workflow scope or an explicit key", ErrNoIdentity)
	case id.WorkflowID != "" && id.RunID != "" && id.ActivityID != "":
		return runScopeID(id.WorkflowID, id.RunID, id.ActivityID), nil
	case id.WorkflowID == "" && id.ActivityID != "" && id.ActivityRunID != "":
		return standaloneScopeID(id.ActivityID, id.ActivityRunID), nil
	}
	return "", fmt.Errorf("%w: the activity has neither a workflow execution nor an activity run ID; give it an explicit key (ScopeExplicit)", ErrNoIdentity)
}
