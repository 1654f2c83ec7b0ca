// Names that 1.x renamed or moved, kept for one release so that code written against 1.0 builds.
// Each says what replaces it; they are removed in the release after next.

package activity

import (
	"time"

	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/telemetry"
)

// Metric, span and tag names: the telemetry package names every one the toolkit emits.
const (
	// Deprecated: use telemetry.ReceiptReserved; removed in the release after next.
	MetricReserved = telemetry.ReceiptReserved
	// Deprecated: use telemetry.ReceiptReplayed; removed in the release after next.
	MetricReplayed = telemetry.ReceiptReplayed
	// Deprecated: use telemetry.ReceiptMismatched; removed in the release after next.
	MetricMismatched = telemetry.ReceiptMismatched
	// Deprecated: use telemetry.ReceiptInProgress; removed in the release after next.
	MetricInProgress = telemetry.ReceiptInProgress
	// Deprecated: use telemetry.ReceiptTakenOver; removed in the release after next.
	MetricTakenOver = telemetry.ReceiptTakenOver
	// Deprecated: use telemetry.ReceiptFencedOut; removed in the release after next.
	MetricFencedOut = telemetry.ReceiptFencedOut

	// Deprecated: use telemetry.SpanReserve; removed in the release after next.
	SpanReserve = telemetry.SpanReserve
	// Deprecated: use telemetry.SpanReplay; removed in the release after next.
	SpanReplay = telemetry.SpanReplay
	// Deprecated: use telemetry.SpanCall; removed in the release after next.
	SpanCall = telemetry.SpanCall
	// Deprecated: use telemetry.SpanReconcile; removed in the release after next.
	SpanReconcile = telemetry.SpanReconcile
	// Deprecated: use telemetry.SpanComplete; removed in the release after next.
	SpanComplete = telemetry.SpanComplete

	// Deprecated: use telemetry.TagToken; removed in the release after next.
	TagToken = telemetry.TagToken
	// Deprecated: use telemetry.TagOperation; removed in the release after next.
	TagOperation = telemetry.TagOperation
)

// Defaults: each Config, Options and Call field's comment states its own, and
// Config.WithDefaults and Options.WithDefaults return them.
const (
	// Deprecated: use migrate.SchemaDefault, or Config.WithDefaults().Schema ("tempotent"); removed in the release after next.
	SchemaDefault = "tempotent"
	// Deprecated: use Config.WithDefaults().MaxPayloadBytes (1 MiB); removed in the release after next.
	MaxPayloadBytesDefault = 1 << 20
	// Deprecated: Call.Lease says its default (a minute without a deadline); removed in the
	// release after next.
	LeaseDefault = time.Minute
	// Deprecated: use Config.WithDefaults().InProgressDelayMax (10 seconds); removed in the release after next.
	InProgressDelayMaxDefault = 10 * time.Second
	// Deprecated: use Config.WithDefaults().InProgressWait (a second); removed in the release after next.
	InProgressWaitDefault = time.Second
	// Deprecated: use Config.WithDefaults().LockTimeout (2 seconds); removed in the release after next.
	LockTimeoutDefault = 2 * time.Second
	// Deprecated: use Config.WithDefaults().StatementTimeout (5 seconds); removed in the release after next.
	StatementTimeoutDefault = 5 * time.Second
	// Deprecated: use Options.WithDefaults().DownstreamKeyMemory (24 hours); removed in the release after next.
	DownstreamKeyMemoryDefault = 24 * time.Hour
	// Deprecated: use Options.WithDefaults().DownstreamSettleTime (a minute); removed in the release after next.
	DownstreamSettleTimeDefault = time.Minute
)

// Sentinels of the error kinds whose types carry data: errors.Is still matches each against its
// type (errors.Is(err, ErrPayloadMismatch) is true of a *MismatchError), until they are removed.
var (
	// ErrPayloadMismatch is matched by *MismatchError.
	//
	// Deprecated: match *MismatchError with errors.As, or ErrTypePayloadMismatch after Temporal; removed in the release after next.
	ErrPayloadMismatch = engine.ErrPayloadMismatch
	// ErrInProgress is matched by *InProgressError.
	//
	// Deprecated: match *InProgressError with errors.As, or ErrTypeInProgress after Temporal; removed in the release after next.
	ErrInProgress = engine.ErrInProgress
	// ErrOutcomeUnknown is matched by *OutcomeUnknownError.
	//
	// Deprecated: match *OutcomeUnknownError with errors.As, or ErrTypeOutcomeUnknown after Temporal; removed in the release after next.
	ErrOutcomeUnknown = engine.ErrOutcomeUnknown
	// ErrFencedOut is matched by *FencedOutError.
	//
	// Deprecated: match *FencedOutError with errors.As, or ErrTypeFencedOut after Temporal; removed in the release after next.
	ErrFencedOut = engine.ErrFencedOut
	// ErrBeyondHorizon is matched by *HorizonError.
	//
	// Deprecated: match *HorizonError with errors.As, or ErrTypeBeyondHorizon after Temporal; removed in the release after next.
	ErrBeyondHorizon = engine.ErrBeyondHorizon
	// ErrPayloadTooLarge is matched by *PayloadTooLargeError.
	//
	// Deprecated: match *PayloadTooLargeError with errors.As, or ErrTypePayloadTooLarge after Temporal; removed in the release after next.
	ErrPayloadTooLarge = engine.ErrPayloadTooLarge
	// ErrStore is matched by *StoreError.
	//
	// Deprecated: match *StoreError with errors.As, or ErrTypeStore after Temporal; removed in the release after next.
	ErrStore = engine.ErrStore
	// ErrReconcileFailed is matched by *ReconcileError.
	//
	// Deprecated: match *ReconcileError with errors.As, or ErrTypeReconcileFailed after Temporal; removed in the release after next.
	ErrReconcileFailed = engine.ErrReconcileFailed
	// ErrForwardUnsettled is matched by *ForwardUnsettledError.
	//
	// Deprecated: match *ForwardUnsettledError with errors.As, or ErrTypeForwardUnsettled after Temporal; removed in the release after next.
	ErrForwardUnsettled = engine.ErrForwardUnsettled
	// ErrBatchUnfinished is matched by *BatchUnfinishedError.
	//
	// Deprecated: match *BatchUnfinishedError with errors.As, or ErrTypeBatchUnfinished after Temporal; removed in the release after next.
	ErrBatchUnfinished = engine.ErrBatchUnfinished
	// ErrCompensated is matched by *CompensatedError.
	//
	// Deprecated: match *CompensatedError with errors.As, or ErrTypeCompensated after Temporal; removed in the release after next.
	ErrCompensated = engine.ErrCompensated
)
