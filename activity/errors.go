package activity

import (
	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/internal/errtype"
)

// Temporal application error types of the errors this package returns. Workflows and retry
// policies can name them (RetryPolicy.NonRetryableErrorTypes, temporal.ApplicationError.Type).
//
// Errors that cross into Temporal lose their Go chain: in a workflow, and after a replay, match
// them by these types, not with errors.As. Inside the activity, errors.As finds the typed error
// of each kind (*MismatchError for ErrTypePayloadMismatch, …) in the cause.
const (
	ErrTypePayloadMismatch  = errtype.PayloadMismatch  // non-retryable: *MismatchError
	ErrTypeInProgress       = errtype.InProgress       // retryable, with a next-retry delay: *InProgressError
	ErrTypeOutcomeUnknown   = errtype.OutcomeUnknown   // non-retryable: *OutcomeUnknownError
	ErrTypeFencedOut        = errtype.FencedOut        // retryable: *FencedOutError
	ErrTypeBeyondHorizon    = errtype.BeyondHorizon    // non-retryable: *HorizonError
	ErrTypeInvalidKey       = errtype.InvalidKey       // non-retryable: keys.ErrInvalidKey and its kin
	ErrTypePayloadTooLarge  = errtype.PayloadTooLarge  // non-retryable: *PayloadTooLargeError
	ErrTypeStore            = errtype.Store            // retryable: *StoreError
	ErrTypeReconcileFailed  = errtype.ReconcileFailed  // retryable: *ReconcileError
	ErrTypeForwardUnsettled = errtype.ForwardUnsettled // retryable, with a next-retry delay: *ForwardUnsettledError
	// ErrTypeMisconfigured: the activity's code or its worker is set up wrong (a worker without
	// NewInterceptor, a misuse of ForEach); no retry can succeed, and the message says what to
	// change (ErrMisconfigured).
	ErrTypeMisconfigured = errtype.Misconfigured // non-retryable
	// ErrTypeBatchUnfinished: some items of a ForEach batch are left to the activity's retry
	// (*BatchUnfinishedError).
	ErrTypeBatchUnfinished = errtype.BatchUnfinished // retryable
	// ErrTypeCompensated: a forward step ran again, after a workflow reset, once its
	// compensation had completed (*CompensatedError).
	ErrTypeCompensated = errtype.Compensated // non-retryable
	// ErrTypeUnauthorized: the authorization hook (Config.Authorize, Options.Authorize,
	// Call.Authorize) refused the caller's tenant, at a first run or a replay
	// (*UnauthorizedError). The hook's own failure is retryable, with the type
	// "tempotent.AuthorizeFailed".
	ErrTypeUnauthorized = errtype.Unauthorized // non-retryable
)

// ErrMisconfigured: the activity's code or its worker is set up wrong, so no retry can succeed
// (ErrTypeMisconfigured once it has crossed into Temporal). It is never returned alone: the error
// that wraps it says what is wrong and what to do (install NewInterceptor, give Items.ID…). The
// other kinds of error are types that carry their data (*MismatchError, *InProgressError, …):
// match them with errors.As, or by their ErrType after they crossed into Temporal.
var ErrMisconfigured = engine.ErrMisconfigured

// MismatchError reports that a key was used again with a different request. Nothing was called.
type MismatchError = engine.MismatchError

// InProgressError reports that another attempt holds the key's lease. Retry after RetryAfter:
// the attempt will have finished, or its lease will have ended and the retry takes over.
type InProgressError = engine.InProgressError

// OutcomeUnknownError reports that an earlier attempt may have had its effect (it was taken over
// after its lease ended), calling the downstream again under the token would not be safe (Reason
// says why: it does not deduplicate, or the token is older than its key memory), and no
// reconcile function was given to ask it. The receipt records this failure, so later attempts
// get it too: find out under Token what happened, then resolve the receipt by hand.
type OutcomeUnknownError = engine.OutcomeUnknownError

// FencedOutError reports that this attempt lost its lease to a takeover and the attempt that took
// over has not recorded an outcome yet. The retry replays whatever is recorded by then.
type FencedOutError = engine.FencedOutError

// ReconcileError reports that asking the downstream what an earlier attempt did failed. It is
// retryable whatever the cause (a refused connection, a 401): not knowing is not an outcome, so
// the receipt still says an effect may have happened, its lease is released, and the next
// attempt asks again.
type ReconcileError = engine.ReconcileError

// ForwardUnsettledError reports, to a compensation, that the forward step it undoes may still
// take effect: its receipt is pending and its last attempt ended less than the downstream's
// settle time ago (or has not ended). "Nothing to undo" is not final yet; retry after
// RetryAfter.
type ForwardUnsettledError = engine.ForwardUnsettledError

// CompensatedError refuses an attempt of a forward step whose compensation has completed: a
// workflow reset to before the step runs it again under the same key (workflow-scope keys
// survive a reset), and its receipt would otherwise be taken over and the downstream called
// again, or a recorded result replayed, as if the effect that was undone stood. A saga would go
// on past the step it compensated (ship goods whose charge was refunded). Nothing was called,
// and the receipt is left as it was. It is non-retryable: a saga that meets it fails at the step
// and compensates, and the compensations that completed replay. To do the step again, start a
// new intent: a new workflow ID, or a new keys.WithID.
type CompensatedError = engine.CompensatedError

// HorizonError refuses an activity that was scheduled longer ago than the store's retention:
// its receipt may have been purged, and running it again could duplicate its effect.
type HorizonError = engine.HorizonError

// PayloadTooLargeError reports a result larger than Config.MaxPayloadBytes. The receipt records
// the failure, not a truncated result.
type PayloadTooLargeError = engine.PayloadTooLargeError

// UnauthorizedError refuses an attempt that the authorization hook did not allow: the caller's
// Tenant may neither run the intent Key nor be handed its recorded result. Nothing was called,
// reserved, recorded or returned, and a receipt already there is left as it was. It is
// non-retryable: grant the tenant access and start the activity again (a new attempt asks the
// hook again), or run the intent under a tenant that may.
type UnauthorizedError = engine.UnauthorizedError

// StoreError wraps a database error met while reading or writing a receipt. It is retryable:
// nothing that happened is forgotten (a receipt write either committed or did not), and the
// next attempt finds out which.
type StoreError = engine.StoreError

// BatchUnfinishedError reports that some items of a ForEach batch are not settled: they failed
// with a retryable error, or another attempt holds them. Return it from the activity: Temporal
// retries it, and the retry replays the settled items and runs the rest.
type BatchUnfinishedError = engine.BatchUnfinishedError

// NotApplied marks err as one after which the effect certainly did not happen (the request was
// never sent: connection refused, a validation error before the call). The receipt then lets
// the next attempt call again without treating the outcome as unknown. Errors not so marked are
// ambiguous: they may have happened after the downstream acted.
func NotApplied(err error) error {
	return engine.NotApplied(err)
}

// IsNotApplied reports whether err was marked with NotApplied, or is (or wraps) an error with a
// method NotApplied() bool that returns true — how packages that do not import this one, such
// as downstream, say that a request was never sent.
func IsNotApplied(err error) bool {
	return engine.IsNotApplied(err)
}
