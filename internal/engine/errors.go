package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/errtype"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
)

// ErrMisconfigured: the activity's code or its worker is set up wrong, so no retry can succeed
// (errtype.Misconfigured once it has crossed into Temporal). It is never returned alone: the error
// that wraps it says what is wrong and what to do (install NewInterceptor, give Items.ID…). The
// other kinds of error are types that carry their data (*MismatchError, *InProgressError, …):
// match them with errors.As, or by their ErrType after they crossed into Temporal.
var ErrMisconfigured = errors.New("misconfigured")

// errNoInterceptor is ErrMisconfigured for what (a registered activity, an activity calling
// ForEach) running on a worker without NewInterceptor.
func errNoInterceptor(what string) error {
	return fmt.Errorf("%w: this worker runs %s without tempotent's interceptor, which reads the key the workflow decided and extends the receipt's lease on heartbeats; install activity.NewInterceptor() in worker.Options.Interceptors",
		ErrMisconfigured, what)
}

// MismatchError reports that a key was used again with a different request. Nothing was called.
type MismatchError struct {
	Key            keys.Key
	Stored, Actual keys.Fingerprint
}

func (e *MismatchError) Error() string {
	if e.Stored.Version != e.Actual.Version && !e.Stored.IsKeyed() && !e.Actual.IsKeyed() {
		return fmt.Sprintf("payload mismatch for %s: the receipt's fingerprint is version %d and this build computes version %d; the receipt cannot be compared, so nothing was called",
			ref(e.Key), e.Stored.Version, e.Actual.Version)
	}
	return fmt.Sprintf("payload mismatch for %s: the same key was used with a different request (recorded %s, got %s); use a new key for a new intent%s",
		ref(e.Key), e.Stored, e.Actual, keyedMismatchNote(e.Stored))
}

func (e *MismatchError) Is(target error) bool { return target == ErrPayloadMismatch }

// InProgressError reports that another attempt holds the key's lease. Retry after RetryAfter:
// the attempt will have finished, or its lease will have ended and the retry takes over.
type InProgressError struct {
	Key        keys.Key
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("%s is in progress in another attempt; retry in %v", ref(e.Key), e.RetryAfter)
}

func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// OutcomeUnknownError reports that an earlier attempt may have had its effect (it was taken over
// after its lease ended), calling the downstream again under the token would not be safe (Reason
// says why: it does not deduplicate, or the token is older than its key memory), and no
// reconcile function was given to ask it. The receipt records this failure, so later attempts
// get it too: find out under Token what happened, then resolve the receipt by hand.
type OutcomeUnknownError struct {
	Key    keys.Key
	Token  keys.Token
	Reason string
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("outcome unknown for %s: an earlier attempt may have had its effect, and calling again is not safe (%s); no reconcile function was given, so it was not called again. Check the downstream for token %s, then resolve the receipt: tempotent receipts resolve %s --applied --result JSON (or --not-applied) --reason WHY",
		ref(e.Key), e.Reason, e.Token, e.Token)
}

func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// FencedOutError reports that this attempt lost its lease to a takeover and the attempt that took
// over has not recorded an outcome yet. The retry replays whatever is recorded by then.
type FencedOutError struct{ Key keys.Key }

func (e *FencedOutError) Error() string {
	return fmt.Sprintf("attempt for %s was fenced out by a newer attempt; its result was not recorded", ref(e.Key))
}

func (e *FencedOutError) Is(target error) bool { return target == ErrFencedOut }

// ReconcileError reports that asking the downstream what an earlier attempt did failed. It is
// retryable whatever the cause (a refused connection, a 401): not knowing is not an outcome, so
// the receipt still says an effect may have happened, its lease is released, and the next
// attempt asks again.
type ReconcileError struct {
	Key   keys.Key
	Token keys.Token
	Err   error
}

func (e *ReconcileError) Error() string {
	return fmt.Sprintf("reconcile %s (token %s): %v; the receipt still says an effect may have happened, and the next attempt asks again", e.Key.Operation, e.Token, e.Err)
}

func (e *ReconcileError) Unwrap() error        { return e.Err }
func (e *ReconcileError) Is(target error) bool { return target == ErrReconcileFailed }

// ForwardUnsettledError reports, to a compensation, that the forward step it undoes may still
// take effect: its receipt is pending and its last attempt ended less than the downstream's
// settle time ago (or has not ended). "Nothing to undo" is not final yet; retry after
// RetryAfter.
type ForwardUnsettledError struct {
	Forward    keys.Key
	RetryAfter time.Duration
}

func (e *ForwardUnsettledError) Error() string {
	return fmt.Sprintf("the forward step %s may still take effect (its outcome is not settled); the compensation retries in %v instead of concluding that there is nothing to undo",
		e.Forward, e.RetryAfter)
}

func (e *ForwardUnsettledError) Is(target error) bool { return target == ErrForwardUnsettled }

// CompensatedError refuses an attempt of a forward step whose compensation has completed: a
// workflow reset to before the step runs it again under the same key (workflow-scope keys
// survive a reset), and its receipt would otherwise be taken over and the downstream called
// again, or a recorded result replayed, as if the effect that was undone stood. A saga would go
// on past the step it compensated (ship goods whose charge was refunded). Nothing was called,
// and the receipt is left as it was. It is non-retryable: a saga that meets it fails at the step
// and compensates, and the compensations that completed replay. To do the step again, start a
// new intent: a new workflow ID, or a new keys.WithID.
type CompensatedError struct {
	Key keys.Key
	// Token is the step's token, under which its effect was made and found by its compensation.
	Token keys.Token
	// Compensation is the token of the compensation that completed, and At when.
	Compensation keys.Token
	At           time.Time
}

func (e *CompensatedError) Error() string {
	return fmt.Sprintf("%s was compensated by %s at %s; a reset run cannot reuse it, and nothing was called: start a new intent (a new workflow ID, or keys.WithID) to do it again",
		ref(e.Key), e.Compensation, e.At.UTC().Format(time.RFC3339))
}

func (e *CompensatedError) Is(target error) bool { return target == ErrCompensated }

// HorizonError refuses an activity that was scheduled longer ago than the store's retention:
// its receipt may have been purged, and running it again could duplicate its effect.
type HorizonError struct {
	Key       keys.Key
	Scheduled time.Time
	Retention time.Duration
}

func (e *HorizonError) Error() string {
	return fmt.Sprintf("%s: the activity was scheduled at %s, longer ago than the receipts' retention (%v); its receipt may have been purged, so it was refused. Start a new intent, or raise Config.Retention above your retry and reset horizon",
		ref(e.Key), e.Scheduled.UTC().Format(time.RFC3339), e.Retention)
}

func (e *HorizonError) Is(target error) bool { return target == ErrBeyondHorizon }

// PayloadTooLargeError reports a result larger than Config.MaxPayloadBytes. The receipt records
// the failure, not a truncated result.
type PayloadTooLargeError struct {
	Key         keys.Key
	Size, Limit int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("result for %s is %d bytes, above the limit of %d (Config.MaxPayloadBytes); return a reference to the data instead of the data", ref(e.Key), e.Size, e.Limit)
}

func (e *PayloadTooLargeError) Is(target error) bool { return target == ErrPayloadTooLarge }

// StoreError wraps a database error met while reading or writing a receipt. It is retryable:
// nothing that happened is forgotten (a receipt write either committed or did not), and the
// next attempt finds out which.
type StoreError struct {
	Op  string // "reserve", "read", "take over", "complete", "release", "commit"
	Key keys.Key
	Err error
}

func (e *StoreError) Error() string {
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Sprintf("%s receipt %s: the receipts table does not exist: apply the migrations first (migrate.Up, activity.Store.Migrate, tempotent migrate, or migrate.List with your own tool): %v", e.Op, ref(e.Key), e.Err)
	}
	if errors.As(e.Err, &pgErr) && pgErr.Code == "23514" && strings.HasPrefix(pgErr.Message, "no partition") { // check_violation
		return fmt.Sprintf("%s receipt %s: the partitioned receipts table has no partition for today: operator.Client.Purge creates them %d days ahead; run it (the worker does, every worker.Config.PurgeEvery; or tempotent purge): %v",
			e.Op, ref(e.Key), schema.PartitionsAhead, e.Err)
	}
	return fmt.Sprintf("%s receipt %s: %v", e.Op, ref(e.Key), e.Err)
}

func (e *StoreError) Unwrap() error        { return e.Err }
func (e *StoreError) Is(target error) bool { return target == ErrStore }

// notApplied marks an error after which the effect certainly did not happen.
type notApplied struct{ err error }

func (e notApplied) Error() string { return e.err.Error() }
func (e notApplied) Unwrap() error { return e.err }

// NotApplied marks err as one after which the effect certainly did not happen (the request was
// never sent: connection refused, a validation error before the call). The receipt then lets
// the next attempt call again without treating the outcome as unknown. Errors not so marked are
// ambiguous: they may have happened after the downstream acted.
func NotApplied(err error) error {
	if err == nil {
		return nil
	}
	return notApplied{err}
}

// IsNotApplied reports whether err was marked with NotApplied, or is (or wraps) an error with a
// method NotApplied() bool that returns true — how packages that do not import this one, such
// as downstream, say that a request was never sent.
func IsNotApplied(err error) bool {
	var na notApplied
	if errors.As(err, &na) {
		return true
	}
	var marked interface{ NotApplied() bool }
	return errors.As(err, &marked) && marked.NotApplied()
}

// ToTemporal turns the engine's errors into Temporal application errors with the exported
// types, keeping the typed error as the cause so errors.As still finds it. Errors that are
// already application errors, and errors from the wrapped function, pass through unchanged.
func ToTemporal(err error) error {
	if err == nil {
		return nil
	}
	var (
		appErr     *temporal.ApplicationError
		unfinished *BatchUnfinishedError
		reconcile  *ReconcileError
		unsettled  *ForwardUnsettledError
		inProgress *InProgressError
		msg        = err.Error()
	)
	switch {
	case errors.As(err, &appErr) && appErr.Type() == errtype.BatchUnfinished:
		return err
	case errors.As(err, &unfinished):
		// Before the pass-through below: it wraps its first item's application error, and the
		// batch's retry must wait as long as that item asks.
		var itemErr *temporal.ApplicationError
		errors.As(unfinished.Err, &itemErr)
		return temporal.NewApplicationErrorWithOptions(msg, errtype.BatchUnfinished, temporal.ApplicationErrorOptions{
			NextRetryDelay: nextRetryDelay(itemErr), Cause: err,
		})
	case errors.As(err, &reconcile):
		// Before the pass-through below: the reconcile function's own error may be a
		// non-retryable application error, and it must not end the intent.
		return temporal.NewApplicationErrorWithOptions(msg, errtype.ReconcileFailed, temporal.ApplicationErrorOptions{Cause: err})
	case errors.As(err, new(*authorizeFailed)):
		// Before the pass-through too: the hook's own error is retried whatever it is; only
		// its false is a refusal.
		return temporal.NewApplicationErrorWithOptions(msg, errtype.AuthorizeFailed, temporal.ApplicationErrorOptions{Cause: err})
	case errors.As(err, &appErr):
		return err
	case errors.As(err, &unsettled):
		return temporal.NewApplicationErrorWithOptions(msg, errtype.ForwardUnsettled, temporal.ApplicationErrorOptions{
			NextRetryDelay: unsettled.RetryAfter, Cause: err,
		})
	case errors.As(err, &inProgress):
		return temporal.NewApplicationErrorWithOptions(msg, errtype.InProgress, temporal.ApplicationErrorOptions{
			NextRetryDelay: inProgress.RetryAfter, Cause: err,
		})
	case errors.As(err, new(*MismatchError)):
		return temporal.NewNonRetryableApplicationError(msg, errtype.PayloadMismatch, err)
	case errors.As(err, new(*OutcomeUnknownError)):
		return temporal.NewNonRetryableApplicationError(msg, errtype.OutcomeUnknown, err)
	case errors.As(err, new(*HorizonError)):
		return temporal.NewNonRetryableApplicationError(msg, errtype.BeyondHorizon, err)
	case errors.As(err, new(*PayloadTooLargeError)):
		return temporal.NewNonRetryableApplicationError(msg, errtype.PayloadTooLarge, err)
	case errors.As(err, new(*CompensatedError)):
		return temporal.NewNonRetryableApplicationError(msg, errtype.Compensated, err)
	case errors.As(err, new(*UnauthorizedError)):
		return temporal.NewNonRetryableApplicationError(msg, errtype.Unauthorized, err)
	case errors.Is(err, ErrMisconfigured):
		return temporal.NewNonRetryableApplicationError(msg, errtype.Misconfigured, err)
	case errors.Is(err, keys.ErrInvalidKey), errors.Is(err, keys.ErrNoIdentity), errors.Is(err, keys.ErrNotCanonicalizable):
		return temporal.NewNonRetryableApplicationError(msg, errtype.InvalidKey, err)
	case errors.As(err, new(*FencedOutError)):
		return temporal.NewApplicationErrorWithOptions(msg, errtype.FencedOut, temporal.ApplicationErrorOptions{Cause: err})
	case errors.As(err, new(*StoreError)):
		return temporal.NewApplicationErrorWithOptions(msg, errtype.Store, temporal.ApplicationErrorOptions{Cause: err})
	}
	return err
}

func nextRetryDelay(err *temporal.ApplicationError) time.Duration {
	if err == nil {
		return 0
	}
	return err.NextRetryDelay()
}

// ref names a key in messages by its operation and token: keys carry workflow IDs and explicit
// IDs, which may hold customer data, and messages end up in logs and workflow histories.
func ref(k keys.Key) string { return fmt.Sprintf("%s (token %s)", k.Operation, k.Token()) }
