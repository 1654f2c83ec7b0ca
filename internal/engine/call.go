package engine

import (
	"cmp"
	"context"
	"time"

	"github.com/tempotent/tempotent/keys"
)

// Call describes one execution of an intent for Do, DoInNewTx and DoInTx. Register and RegisterTx
// build it from the activity's context; build it yourself to use receipts outside Temporal.
type Call struct {
	// Key names the intent. Required; validated before anything is written.
	Key keys.Key
	// Request is the request the intent makes (the activity's input): its fingerprint
	// (keys.FingerprintOf, which honours the tempotent struct tags) is what a receipt under the
	// same Key must have been recorded for, or the call is a payload mismatch. Give Request, or
	// Fingerprint, or both; with Request, a receipt recorded under an older fingerprint version
	// is compared under that version instead of being refused.
	Request any
	// Fingerprint identifies the request; zero means keys.FingerprintOf(Request). A receipt with
	// the same Key and another Fingerprint is a payload mismatch.
	Fingerprint keys.Fingerprint
	// Lease is how long this attempt holds the key before another may take over. Zero means
	// until ctx's deadline, or a minute when ctx has none (capped by the activity's heartbeat
	// timeout, which each heartbeat renews).
	Lease time.Duration
	// Attempt is which attempt at the intent this call is, counting from 1, when the caller knows
	// it (a job queue's attempt number); zero means the Temporal activity's own attempt, or a
	// first attempt outside an activity. It only picks the first statement: from the second
	// attempt on, an earlier attempt has probably finished, and Do reads the receipt with a plain
	// lookup first (one round trip, nothing written), reserving only when that finds no finished
	// receipt; a first attempt reserves at once, so that a first execution keeps its two round
	// trips. A call that runs again safely (a Batch activity's own receipt) is more often taken
	// over than replayed on a retry, so its lookup takes the receipt over too when its lease has
	// ended, in the same statement. Either way the answer is the same.
	Attempt int32
	// ScheduledAt, when set, arms the replay-horizon guard: a call scheduled longer ago than the
	// retention is refused with a HorizonError.
	ScheduledAt time.Time
	// DownstreamDeduplicates declares that the external system deduplicates on the token, so
	// an attempt that takes over after an unknown outcome may simply call again with the same
	// token (Stripe and the downstream package's providers do) — as long as the token is younger
	// than DownstreamKeyMemory.
	DownstreamDeduplicates bool
	// DownstreamKeyMemory is how long the downstream remembers a token after its first use
	// (Stripe: 24 hours). Sending again a token it may have forgotten could be a second effect,
	// so a takeover of a receipt first reserved longer ago than this reconciles, or fails with
	// OutcomeUnknownError, as for a downstream that does not deduplicate. Zero means
	// 24 hours, Stripe's.
	DownstreamKeyMemory time.Duration
	// DownstreamSettleTime is the longest the downstream may take to apply a request after the
	// attempt that sent it ended (timed out, was fenced out, or its worker died), or to show an
	// applied one in its search: the request may still be in flight, or the downstream's search
	// may lag its writes (Stripe's does). Until that long after the last attempt ended (for
	// ForwardSettled, also after the forward receipt was completed or failed), "the downstream
	// has no effect under this token" is not final: Reconcile's "not found" is not trusted yet
	// (the takeover waits with an InProgressError), and ForwardSettled says a compensation must
	// retry. Zero means a minute, which covers a request held by the downstream past the attempt's
	// timeout and the lag of a search index such as Stripe's.
	DownstreamSettleTime time.Duration
	// Reconcile, for a downstream that does not deduplicate (or a token past its key memory),
	// asks it what an earlier attempt did under the token after a takeover. Without it, such a
	// takeover fails with OutcomeUnknownError instead of guessing.
	Reconcile ReconcileFunc
	// Authorize, when set, is this call's authorization hook (see AuthorizeFunc), asked before
	// anything is reserved, run or replayed, instead of the store's Config.Authorize. Register and
	// RegisterTx set it from Options.Authorize.
	Authorize AuthorizeFunc

	// origin is filled from the context by the Store, never by callers.
	origin origin
	// plain is the unkeyed Fingerprint when the Store keyed it (Config.FingerprintKeys).
	plain keys.Fingerprint
	// readUnfinished says that the caller has just read the receipt and found none finished
	// (ForEach's items), so that no lookup goes before the reservation.
	readUnfinished bool
	// authorized says that the caller asked the authorization hook already (ForEach, before the
	// statement that reserved the item's chunk), so that Do does not ask it twice.
	authorized bool
	// held is what the statement of a ForEach chunk wrote or found for this item (Batch.Item):
	// Do goes on from there instead of reserving.
	held *held
}

// Defaults of the downstream's properties in Call and Options (Options.WithDefaults), and of a
// lease when nothing else bounds it (Call.Lease).
const (
	// downstreamKeyMemoryDefault is Stripe's: idempotency keys are kept for at least 24 hours.
	downstreamKeyMemoryDefault = 24 * time.Hour
	// downstreamSettleTimeDefault covers a request held by the downstream past the attempt's
	// timeout and the lag of a search index such as Stripe's (up to a minute).
	downstreamSettleTimeDefault = time.Minute
	// leaseDefault is the lease taken when the context has no deadline (Do and DoInNewTx called
	// outside an activity without Call.Lease). Activities lease until their own deadline.
	leaseDefault = time.Minute
)

func (c Call) keyMemory() time.Duration {
	return cmp.Or(max(c.DownstreamKeyMemory, 0), downstreamKeyMemoryDefault)
}

// runsAgain says that calling again under the token is safe however long ago it was first sent,
// within the store's retention: a Batch activity's own receipt (or a call declared so), whose
// items' receipts are its downstream. ForEach runs only under such a receipt, and a retry of one
// takes it over in one statement (Store.readTakeOver).
func (c Call) runsAgain(retention time.Duration) bool {
	return c.DownstreamDeduplicates && c.keyMemory() >= retention
}

func (c Call) settleTime() time.Duration {
	return cmp.Or(max(c.DownstreamSettleTime, 0), downstreamSettleTimeDefault)
}

// ReconcileFunc asks the downstream what happened under token. It returns the result the
// earlier attempt produced and found = true when the effect happened; found = false when it
// certainly did not (the function is then called); or an error. An error never settles the
// intent, whatever it is: the receipt keeps saying that an effect may have happened, and the
// attempt fails with a retryable ReconcileError, so that the next one asks again.
type ReconcileFunc func(ctx context.Context, token keys.Token) (result any, found bool, err error)
