package shard

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
)

// The types of the application errors a routed activity fails with before it reaches a store.
// Both are retryable: a move ends, a directory answers again.
const (
	ErrTypeTenantMoving = "tempotent.TenantMoving" // *MovingError
	ErrTypeRoute        = "tempotent.Route"        // *RouteError
)

// MovingError is a call refused because its tenant is being moved from one shard to another:
// between the move's fence and its switch nothing of the tenant's is reserved, run or
// replayed anywhere. Retry it; once the move has switched, the retry goes to the new shard,
// where the tenant's receipts were copied, and replays what was recorded.
type MovingError struct {
	Tenant, From, To string
}

func (e *MovingError) Error() string {
	return fmt.Sprintf("tenant %q is being moved from shard %q to %q: retry once the move has switched (tempotent shard move)", e.Tenant, e.From, e.To)
}

// RouteError is a tenant's shard that could not be known: the directory did not answer, or
// named a shard or a default this Router was not configured with. Err says which.
type RouteError struct {
	Tenant string
	Err    error
}

func (e *RouteError) Error() string {
	return fmt.Sprintf("route tenant %q to its shard: %v", e.Tenant, e.Err)
}
func (e *RouteError) Unwrap() error { return e.Err }

// toTemporal turns the Router's errors into retryable application errors of their types.
func toTemporal(err error) error {
	var (
		moving *MovingError
		route  *RouteError
	)
	switch {
	case errors.As(err, &moving):
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeTenantMoving, err)
	case errors.As(err, &route):
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeRoute, err)
	}
	return err
}
