// Package errtype holds the Temporal application error types of every error tempotent returns,
// in one place. Errors that cross into Temporal lose their Go chain: workflows and retry policies
// match them by these strings (temporal.ApplicationError.Type, RetryPolicy.NonRetryableErrorTypes),
// not with errors.Is. The exported constants of the activity, downstream and saga packages are
// these values.
package errtype

// Receipts (the activity package).
const (
	PayloadMismatch  = "tempotent.PayloadMismatch"     // non-retryable
	InProgress       = "tempotent.InProgress"          // retryable, with a next-retry delay
	OutcomeUnknown   = "tempotent.OutcomeUnknown"      // non-retryable
	FencedOut        = "tempotent.FencedOut"           // retryable
	BeyondHorizon    = "tempotent.BeyondReplayHorizon" // non-retryable
	InvalidKey       = "tempotent.InvalidKey"          // non-retryable
	PayloadTooLarge  = "tempotent.PayloadTooLarge"     // non-retryable
	Store            = "tempotent.StoreUnavailable"    // retryable
	ReconcileFailed  = "tempotent.ReconcileFailed"     // retryable
	ForwardUnsettled = "tempotent.ForwardUnsettled"    // retryable, with a next-retry delay
	Misconfigured    = "tempotent.Misconfigured"       // non-retryable
	BatchUnfinished  = "tempotent.BatchUnfinished"     // retryable
	Compensated      = "tempotent.Compensated"         // non-retryable
	Unauthorized     = "tempotent.Unauthorized"        // non-retryable
	AuthorizeFailed  = "tempotent.AuthorizeFailed"     // retryable: the authorization hook failed
)

// Downstream calls (the downstream package).
const (
	DownstreamNetwork     = "tempotent.DownstreamNetwork"     // retryable, same key
	DownstreamUnavailable = "tempotent.DownstreamUnavailable" // 5xx: retryable, same key
	DownstreamRateLimited = "tempotent.DownstreamRateLimited" // 429: retryable after Retry-After
	DownstreamInFlight    = "tempotent.DownstreamInFlight"    // 409 same key in flight: retryable
	DownstreamRejected    = "tempotent.DownstreamRejected"    // other 4xx: non-retryable
	DownstreamNoKey       = "tempotent.DownstreamNoKey"       // an unsafe request without a key: non-retryable
	DownstreamCircuitOpen = "tempotent.DownstreamCircuitOpen" // the host's circuit is open, not sent: retryable
)

// Sagas (the saga package).
const (
	SagaStep           = "tempotent.SagaStep"           // a step that could not be scheduled: non-retryable
	CompensationFailed = "tempotent.CompensationFailed" // non-retryable
)

// Messages (the inbox package).
const (
	InboxInProgress = "tempotent.InboxInProgress" // retryable
	InboxMismatch   = "tempotent.InboxMismatch"   // non-retryable
)
