package keys

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
)

type givenKey struct{}

type given struct{ operation, id string }

// Given returns a context that gives an activity with no workflow behind it its intent: operation
// and an explicit business id, keyed as WithID keys it. Use it where no workflow decides the key:
// in TestActivityEnvironment (pass it as worker.Options.BackgroundActivityContext), or around
// activity code that a Nexus operation handler runs, with the operation's request ID. An intent
// header written by a workflow wins over it.
func Given(ctx context.Context, operation, id string) context.Context {
	return context.WithValue(ctx, givenKey{}, given{operation: operation, id: id})
}

// Explicit returns the key of the business intent operation/id in namespace and tenant, keyed as
// WithID keys it ("explicit:" and id), for code that runs receipts outside Temporal (the
// activity package's Do). It returns an *InvalidKeyError for a malformed part.
func Explicit(namespace, tenant, operation, id string) (Key, error) {
	if err := validateID(id); err != nil {
		return Key{}, err
	}
	k := Key{Namespace: namespace, Tenant: tenant, Operation: operation, ID: explicitScopeID(id)}
	return k, k.Validate()
}

// FromActivity returns the key of the activity running in ctx: the operation and ID that workflow
// code decided (see WithStep), in the activity's namespace and tenant. It never derives a key of
// its own for an activity that a workflow scheduled, and never returns an empty or shared one:
//
//   - an activity scheduled by a workflow gets the key from its intent header, which the
//     interceptor writes on the workflow side; a header it cannot honour (another version, a
//     malformed part) is an *InvalidKeyError, and a missing one — the workflow's worker lacks the
//     interceptor, or the activity runs in TestActivityEnvironment — matches ErrNoIdentity;
//   - an activity with no workflow gets its key from what it is given (Given), or, started
//     standalone by a client, from its activity ID and activity run ID
//     ("activity:<activity ID>/<activity run ID>"), stable across its retries.
//
// It needs the interceptor (NewInterceptor, or the activity package's) on the worker that runs
// the activity.
func FromActivity(ctx context.Context) (Key, error) {
	if !activity.IsActivity(ctx) {
		return Key{}, errors.New("keys.FromActivity: ctx is not an activity's context")
	}
	h, installed := ctx.Value(headerKey{}).(headerRead)
	if !installed {
		return Key{}, fmt.Errorf("%w: this worker runs activities without tempotent's interceptor; install activity.NewInterceptor() (or keys.NewInterceptor()) in worker.Options.Interceptors", ErrNoIdentity)
	}
	info := activity.GetInfo(ctx)
	k := Key{Namespace: info.Namespace, Tenant: TenantFrom(ctx)}
	switch g, isGiven := ctx.Value(givenKey{}).(given); {
	case h.err != nil:
		return Key{}, h.err
	case h.present && h.intent.Refused != "":
		return Key{}, fmt.Errorf("%w: activity %s: %s", ErrNoIdentity, info.ActivityType.Name, h.intent.Refused)
	case h.present:
		k.Operation, k.ID = h.intent.Operation, h.intent.ID
	case isGiven:
		if err := validateID(g.id); err != nil {
			return Key{}, err
		}
		k.Operation, k.ID = g.operation, explicitScopeID(g.id)
	case info.WorkflowExecution.ID == "" && info.ActivityID != "" && info.ActivityRunID != "":
		k.Operation, k.ID = info.ActivityType.Name, standaloneScopeID(info.ActivityID, info.ActivityRunID)
	default:
		return Key{}, fmt.Errorf("%w: activity %s carries no intent header: install tempotent's interceptor on the worker that runs the workflow; an activity with no workflow (TestActivityEnvironment, a Nexus handler) needs its key given with keys.Given", ErrNoIdentity, info.ActivityType.Name)
	}
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	if f := h.intent.Compensates; h.present && f != nil {
		// The compensation's ID was made on the workflow side from the forward key's token; the
		// forward key here, in the activity's namespace and tenant, must make the same one.
		forward := Key{Namespace: k.Namespace, Tenant: k.Tenant, Operation: f.Operation, ID: f.ID}
		if forward.Validate() != nil || compensationID(forward.Operation, forward.Token()) != k.ID {
			return Key{}, &InvalidKeyError{Part: "intent header", Reason: "names a forward step that does not match its compensation key (another namespace or tenant than the workflow's?)"}
		}
	}
	return k, nil
}

// CompensatedKeyFrom returns, in a compensation activity scheduled with WithCompensation, the key
// of the forward step it compensates, in the activity's namespace and tenant: the key of the
// forward step's receipt, which tells whether the forward effect can still happen (see the
// activity package's ForwardSettled).
func CompensatedKeyFrom(ctx context.Context) (Key, bool) {
	h, _ := ctx.Value(headerKey{}).(headerRead)
	f := h.intent.Compensates
	if !h.present || f == nil || !activity.IsActivity(ctx) {
		return Key{}, false
	}
	k := Key{Namespace: activity.GetInfo(ctx).Namespace, Tenant: TenantFrom(ctx), Operation: f.Operation, ID: f.ID}
	return k, k.Validate() == nil
}

// CompensatesFrom returns, in a compensation activity scheduled with WithCompensation, the token
// of the forward step it compensates: the key under which the forward effect (say, a charge) was
// made, so the compensation can find it at the downstream even when the forward activity's result
// was never seen.
func CompensatesFrom(ctx context.Context) (Token, bool) {
	k, ok := CompensatedKeyFrom(ctx)
	if !ok {
		return "", false
	}
	return k.Token(), true
}
