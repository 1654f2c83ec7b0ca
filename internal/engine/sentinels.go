package engine

import "errors"

// Sentinels of the error kinds whose types carry data, kept only for the activity package's
// deprecated sentinels (activity/deprecated.go re-exports them): errors.Is still matches each
// against its type (errors.Is(err, ErrPayloadMismatch) is true of a *MismatchError). The engine
// never returns them; it goes with them, in the release after next.
var (
	// ErrPayloadMismatch is matched by *MismatchError.
	ErrPayloadMismatch = errors.New("payload mismatch")
	// ErrInProgress is matched by *InProgressError.
	ErrInProgress = errors.New("in progress")
	// ErrOutcomeUnknown is matched by *OutcomeUnknownError.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrFencedOut is matched by *FencedOutError.
	ErrFencedOut = errors.New("fenced out")
	// ErrBeyondHorizon is matched by *HorizonError.
	ErrBeyondHorizon = errors.New("beyond the replay horizon")
	// ErrPayloadTooLarge is matched by *PayloadTooLargeError.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrStore is matched by *StoreError.
	ErrStore = errors.New("receipt store unavailable")
	// ErrReconcileFailed is matched by *ReconcileError.
	ErrReconcileFailed = errors.New("reconcile failed")
	// ErrForwardUnsettled is matched by *ForwardUnsettledError.
	ErrForwardUnsettled = errors.New("forward step not settled")
	// ErrBatchUnfinished is matched by *BatchUnfinishedError.
	ErrBatchUnfinished = errors.New("batch unfinished")
	// ErrCompensated is matched by *CompensatedError.
	ErrCompensated = errors.New("compensated")
)
