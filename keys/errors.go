package keys

import (
	"errors"
	"fmt"
)

// ErrInvalidKey is matched (errors.Is) by every *InvalidKeyError: a key part, tenant, step or
// explicit id that was empty, too long, or not printable UTF-8.
var ErrInvalidKey = errors.New("invalid idempotency key")

// ErrNoIdentity is returned when an activity's context does not carry enough identity to derive a
// key for the requested scope: a standalone activity (no workflow) with no explicit id, or the
// Workflow scope without the header that the workflow-side interceptor writes. Deriving never
// falls back to an empty or shared id.
var ErrNoIdentity = errors.New("no identity to derive an idempotency key from")

// ErrPinnedContext is returned, on the future of an activity or child workflow, when workflow
// code scheduled it with a context that StepKey or WithCompensation returned and that context
// cannot key it: another activity already took its key, or a child workflow was started with it
// before any activity did (a child keys its own activities, never under the parent's key). Such
// a context keys exactly one activity. It crosses into Temporal as a non-retryable
// tempotent.InvalidKey error.
var ErrPinnedContext = errors.New("a context from keys.StepKey or keys.WithCompensation keys exactly one activity")

// InvalidKeyError says which part of a key was rejected and why. It matches ErrInvalidKey.
type InvalidKeyError struct {
	// Part names the rejected part: "namespace", "tenant", "operation", "id", "step" or
	// "compensation".
	Part string
	// Reason says what was wrong with it, in words a caller can act on.
	Reason string
}

func (e *InvalidKeyError) Error() string {
	return fmt.Sprintf("invalid idempotency key: %s %s", e.Part, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidKey) true.
func (e *InvalidKeyError) Is(target error) bool { return target == ErrInvalidKey }
