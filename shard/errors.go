package shard

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"
)

// The types of the application errors a routed activity fails with before it reaches a store.
// Both are retryable: a move ends, a directory answers again.
const (
	ErrTypeTenantMoving = "tempotent.TenantMoving" // *MovingError
	ErrTypeRoute        = "tempotent.Route"        // *RouteError
	ErrTypeTenantMoved  = "tempotent.TenantMoved"  // *MovedError
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

// MovedError is a receipt statement refused by a shard because its tenant has moved away from
// it (Move fenced the tenant there; the store was opened with activity.Config.TenantFences):
// the caller was handed the old shard's store before the move and reached it after. Nothing was
// written: the statement, and the transaction it was in (DoInNewTx's, with its business
// writes), failed. Look the tenant's route up again (Router.Forget, then Router.Store) and retry
// on its new shard, where its receipts were copied; Register and RegisterTx do so themselves.
// It is retryable.
type MovedError struct {
	// Tenant is the tenant the shard refused, as the shard named it; To, its new shard.
	Tenant, To string
	Err        error
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("tenant %q has moved to shard %q: this shard refuses its receipts; look its shard up again (shard.Router.Forget, shard.Router.Store) and retry there: %v", e.Tenant, e.To, e.Err)
}
func (e *MovedError) Unwrap() error { return e.Err }

// sqlstateTenantMoved is what the shard's fence check raises (migration 012's tenant_moved),
// with the tenant and its new shard in its detail, a JSON object (movedDetail).
const sqlstateTenantMoved = "TT001"

// movedDetail is the DETAIL of tenant_moved's error.
type movedDetail struct {
	Tenant  string `json:"tenant"`
	MovedTo string `json:"moved_to"`
}

// AsMoved returns err as a *MovedError of tenant if it is, or wraps, a shard's refusal of that
// tenant as moved away. A refusal of another tenant (the shard names the tenant it refused) is
// not one: it says nothing of where tenant is, and AsMoved returns false.
func AsMoved(err error, tenant string) (*MovedError, bool) {
	var moved *MovedError
	if errors.As(err, &moved) {
		return moved, moved.Tenant == tenant
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateTenantMoved {
		return nil, false
	}
	var d movedDetail
	if json.Unmarshal([]byte(pgErr.Detail), &d) != nil || d.Tenant != tenant {
		return nil, false
	}
	return &MovedError{Tenant: d.Tenant, To: d.MovedTo, Err: err}, true
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
		moved  *MovedError
		route  *RouteError
	)
	switch {
	case errors.As(err, &moving):
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeTenantMoving, err)
	case errors.As(err, &moved):
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeTenantMoved, err)
	case errors.As(err, &route):
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeRoute, err)
	}
	return err
}
