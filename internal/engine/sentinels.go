package engine

import "errors"

// Sentinels of the error kinds whose types carry data: errors.Is still matches each against its
// type (errors.Is(err, ErrPayloadMismatch) is true of a *MismatchError), until they are removed. The
// activity package re-exports them, deprecated, in activity/deprecated.go.
var (
	// ErrPayloadMismatch is matched by *MismatchError.
	//
	// Deprecated: match *MismatchError with errors.As, or ErrTypePayloadMismatch after Temporal; removed in the release after next.
	ErrPayloadMismatch = errors.New("payload mismatch")

	// ErrInProgress is matched by *InProgressError.
	//
	// Deprecated: match *InProgressError with errors.As, or ErrTypeInProgress after Temporal; removed in the release after next.
	ErrInProgress = errors.New("in progress")
	// ErrOutcomeUnknown is matched by *OutcomeUnknownError.
	//
	// Deprecated: match *OutcomeUnknownError with errors.As, or ErrTypeOutcomeUnknown after Temporal; removed in the release after next.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrFencedOut is matched by *FencedOutError.
	//
	// Deprecated: match *FencedOutError with errors.As, or ErrTypeFencedOut after Temporal; removed in the release after next.
	ErrFencedOut = errors.New("fenced out")
	// ErrBeyondHorizon is matched by *HorizonError.
	//
	// Deprecated: match *HorizonError with errors.As, or ErrTypeBeyondHorizon after Temporal; removed in the release after next.
	ErrBeyondHorizon = errors.New("beyond the replay horizon")
	// ErrPayloadTooLarge is matched by *PayloadTooLargeError.
	//
	// Deprecated: match *PayloadTooLargeError with errors.As, or ErrTypePayloadTooLarge after Temporal; removed in the release after next.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrStore is matched by *StoreError.
	//
	// Deprecated: match *StoreError with errors.As, or ErrTypeStore after Temporal; removed in the release after next.
	ErrStore = errors.New("receipt store unavailable")
	// ErrReconcileFailed is matched by *ReconcileError.
	//
	// Deprecated: match *ReconcileError with errors.As, or ErrTypeReconcileFailed after Temporal; removed in the release after next.
	ErrReconcileFailed = errors.New("reconcile failed")
	// ErrForwardUnsettled is matched by *ForwardUnsettledError.
	//
	// Deprecated: match *ForwardUnsettledError with errors.As, or ErrTypeForwardUnsettled after Temporal; removed in the release after next.
	ErrForwardUnsettled = errors.New("forward step not settled")
	// ErrBatchUnfinished is matched by *BatchUnfinishedError.
	//
	// Deprecated: match *BatchUnfinishedError with errors.As, or ErrTypeBatchUnfinished after Temporal; removed in the release after next.
	ErrBatchUnfinished = errors.New("batch unfinished")
	// ErrCompensated is matched by *CompensatedError.
	//
	// Deprecated: match *CompensatedError with errors.As, or ErrTypeCompensated after Temporal; removed in the release after next.
	ErrCompensated = errors.New("compensated")
)
