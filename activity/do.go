package activity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/keys"
)

// Call describes one execution of an intent for Do, DoInNewTx and DoInTx. Register and RegisterTx
// build it from the activity's context; build it yourself to use receipts outside Temporal.
type Call struct {
	// Key names the intent. Required; validated before anything is written.
	Key keys.Key
	// Fingerprint identifies the request. A receipt with the same Key and another Fingerprint is
	// a payload mismatch.
	Fingerprint keys.Fingerprint
	// Lease is how long this attempt holds the key before another may take over. Zero means
	// until ctx's deadline, or LeaseDefault when ctx has none.
	Lease time.Duration
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
	// DownstreamKeyMemoryDefault.
	DownstreamKeyMemory time.Duration
	// DownstreamSettleTime is the longest the downstream may take to apply a request after the
	// attempt that sent it ended (timed out, was fenced out, or its worker died): the request
	// may still be in flight, or the downstream's search may lag its writes (Stripe's does).
	// Until that long after the last attempt ended, "the downstream has no effect under this
	// token" is not final: Reconcile's "not found" is not trusted yet (the takeover waits with
	// an InProgressError), and ForwardSettled says a compensation must retry. Zero means
	// DownstreamSettleTimeDefault.
	DownstreamSettleTime time.Duration
	// Reconcile, for a downstream that does not deduplicate (or a token past its key memory),
	// asks it what an earlier attempt did under the token after a takeover. Without it, such a
	// takeover fails with OutcomeUnknownError instead of guessing.
	Reconcile ReconcileFunc
}

// Defaults of the downstream's properties in Call and Options.
const (
	// DownstreamKeyMemoryDefault is Stripe's: idempotency keys are kept for at least 24 hours.
	DownstreamKeyMemoryDefault = 24 * time.Hour
	// DownstreamSettleTimeDefault covers a request held by the downstream past the attempt's
	// timeout and the lag of a search index such as Stripe's (up to a minute).
	DownstreamSettleTimeDefault = time.Minute
)

func (c Call) keyMemory() time.Duration {
	return cmp.Or(max(c.DownstreamKeyMemory, 0), DownstreamKeyMemoryDefault)
}

func (c Call) settleTime() time.Duration {
	return cmp.Or(max(c.DownstreamSettleTime, 0), DownstreamSettleTimeDefault)
}

// ReconcileFunc asks the downstream what happened under token. It returns the result the
// earlier attempt produced and found = true when the effect happened; found = false when it
// certainly did not (the function is then called); or an error. An error never settles the
// intent, whatever it is: the receipt keeps saying that an effect may have happened, and the
// attempt fails with a retryable ReconcileError, so that the next one asks again.
type ReconcileFunc func(ctx context.Context, token keys.Token) (result any, found bool, err error)

// Receipt states.
const (
	StatePending   = "pending"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// receipt is a receipts row as the state machine needs it.
type receipt struct {
	inserted    bool
	fence       int64
	reservation pgtype.UUID // NULL on receipts written before reservation identities
	fingerprint keys.Fingerprint
	state       string
	result      []byte
	failure     []byte
	errType     *string
	errMessage  *string
	// lease is the time left on the lease; negative once it has ended (how long ago), zero on a
	// finished receipt.
	lease          time.Duration
	effectPossible bool
	// age is how long ago the receipt was first reserved: when its token was first sent.
	age time.Duration
}

func scanReceipt(row pgx.Row) (receipt, error) {
	var (
		r         receipt
		fp        []byte
		fpVersion *int16
		leaseUS   *int64
		ageUS     int64
		state     *string
	)
	err := row.Scan(&r.inserted, &r.fence, &r.reservation, &fp, &fpVersion, &state, &r.result, &r.failure,
		&r.errType, &r.errMessage, &leaseUS, &r.effectPossible, &ageUS)
	if err != nil {
		return r, err
	}
	if fpVersion != nil {
		r.fingerprint.Version = *fpVersion
		copy(r.fingerprint.Sum[:], fp)
	}
	if state != nil {
		r.state = *state
	}
	if leaseUS != nil {
		r.lease = time.Duration(*leaseUS) * time.Microsecond
	}
	r.age = time.Duration(ageUS) * time.Microsecond
	return r, nil
}

type payloadFunc func(ctx context.Context) (*commonpb.Payload, error)

// do runs the external-effect state machine of the module's DESIGN.md for one call.
func (s *Store) do(ctx context.Context, c Call, fn payloadFunc) (*commonpb.Payload, error) {
	if err := s.check(c); err != nil {
		return nil, err
	}
	k, lease := c.Key, s.leaseFor(ctx, c)
	// Leases and retention are measured on the database clock (now() in every statement); only
	// their lengths come from here.
	obs := newObserver(ctx, s, k)

	res := newReservation()
	var (
		r   receipt
		err error
	)
	for range 2 {
		r, err = scanReceipt(s.queryRow(ctx, s.receipts, s.reserveSettings(c), s.sql.reserve, k.Namespace, k.Tenant, k.Operation, k.ID,
			string(k.Token()), c.Fingerprint.Sum[:], c.Fingerprint.Version, res.uuid(), lease.Microseconds(), s.cfg.Retention.Microseconds()))
		if errors.Is(err, pgx.ErrNoRows) {
			// A concurrent attempt's receipt, committed after this statement's snapshot. It can
			// be gone again by the time it is read (its reservation lost in a crash): reserve
			// once more.
			r, err = s.read(ctx, k)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return nil, &StoreError{Op: "reserve", Key: k, Err: err}
	}
	if r.inserted {
		obs.count(MetricReserved)
		return s.run(ctx, &attempt{call: c, reservation: res, obs: obs}, fn)
	}

	// At most a few rounds: each round either answers, or lost a takeover race to an attempt
	// that changed the row.
	for range 3 {
		if err := s.checkFingerprint(c, r, obs); err != nil {
			return nil, err
		}
		switch r.state {
		case StateCompleted, StateFailed:
			obs.count(MetricReplayed)
			return s.replay(k, r)
		}
		if r.lease > 0 {
			if finished, ok := s.await(ctx, k, r); ok {
				r = finished
				continue
			}
			obs.count(MetricInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: s.retryAfter(r.lease)}
		}
		a := &attempt{call: c, reservation: newReservation(), obs: obs, effectPossible: r.effectPossible, age: r.age,
			lastEnded: time.Now().Add(r.lease)}
		if wait := a.settling(-r.lease); wait > 0 {
			// The attempt before may have sent a request that the downstream has not applied
			// yet, and asking it now could hear "not found" for an effect that is on its way.
			obs.count(MetricInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: s.retryAfter(wait)}
		}
		var fence, ageUS int64
		err := s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.takeOver, k.Namespace, k.Tenant, k.Operation, k.ID, r.reservation,
			a.reservation.uuid(), lease.Microseconds(), s.cfg.Retention.Microseconds()).Scan(&fence, &ageUS)
		if err == nil {
			a.age = time.Duration(ageUS) * time.Microsecond
			obs.count(MetricTakenOver)
			obs.log("took over a receipt whose lease ended", "fence", fence, "effect_possible", r.effectPossible)
			return s.run(ctx, a, fn)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, &StoreError{Op: "take over", Key: k, Err: err}
		}
		if r, err = s.read(ctx, k); err != nil {
			return nil, &StoreError{Op: "read", Key: k, Err: err}
		}
	}
	return nil, &InProgressError{Key: k, RetryAfter: 100 * time.Millisecond}
}

// retryAfter is the next-retry delay of an InProgressError when the key is busy for wait more.
func (s *Store) retryAfter(wait time.Duration) time.Duration {
	return min(max(wait, 100*time.Millisecond), s.cfg.InProgressDelayMax)
}

// attempt is one execution that holds a receipt under its reservation.
type attempt struct {
	call        Call
	reservation reservation
	obs         observer
	// effectPossible says that an earlier attempt may have had the effect, and nothing has
	// shown since that it did not. It is written back to the receipt when this attempt
	// releases it, so that no attempt forgets what an earlier one may have done.
	effectPossible bool
	// age is how long ago the receipt was first reserved (zero for a new reservation).
	age time.Duration
	// lastEnded is when the lease of the attempt before this one ended (for a takeover): the
	// settle time counts from there.
	lastEnded time.Time
}

// unsafeToSend says why calling the downstream again under the token would not be safe after an
// earlier attempt that may have had its effect, or "" when it is.
func (a *attempt) unsafeToSend() string {
	switch {
	case !a.effectPossible:
		return ""
	case !a.call.DownstreamDeduplicates:
		return "the downstream does not deduplicate"
	case a.age > a.call.keyMemory():
		return fmt.Sprintf("the token was first sent %v ago, longer than the downstream's key memory (%v), which may have forgotten it",
			a.age.Round(time.Second), a.call.keyMemory())
	}
	return ""
}

// settling returns how much longer to wait before asking the downstream what an earlier attempt
// did, given how long ago the last attempt ended: zero when the answer would be final, or when
// no one will ask.
func (a *attempt) settling(ended time.Duration) time.Duration {
	if a.call.Reconcile == nil || a.unsafeToSend() == "" {
		return 0
	}
	return max(a.call.settleTime()-ended, 0)
}

// await watches a receipt that a live attempt holds until the attempt finishes or its lease
// ends, for at most InProgressWait. It returns the receipt as it then is and true, or false when
// the attempt is still running.
func (s *Store) await(ctx context.Context, k keys.Key, r receipt) (receipt, bool) {
	deadline := time.Now().Add(min(s.cfg.InProgressWait, r.lease))
	for delay := 5 * time.Millisecond; time.Until(deadline) >= delay; delay = min(2*delay, 200*time.Millisecond) {
		select {
		case <-ctx.Done():
			return r, false
		case <-time.After(delay):
		}
		next, err := s.read(ctx, k)
		if err != nil {
			return r, false // the caller's InProgressError leads to a retry that reads again
		}
		if next.state != StatePending || next.lease <= 0 {
			return next, true
		}
	}
	return r, false
}

// reserveSettings picks how durably a new reservation commits. The completion that follows it
// always commits durably, and its WAL flush carries the reservation's records with it, so a first
// execution waits for one flush, not two. The reservation alone is lost only if Postgres crashes
// (or fails over) in the moment between the two, before its WAL writer flushed (within
// 3 × wal_writer_delay). The attempt's completion then matches no row, and the retry finds no
// receipt and calls the downstream again with the same token: harmless exactly when the
// downstream deduplicates on that token, so only then is the reservation asynchronous. For any
// other downstream, the durable reservation is what lets a retry know an effect may have
// happened.
func (s *Store) reserveSettings(c Call) string {
	if c.DownstreamDeduplicates {
		return s.sql.settingsAsync
	}
	return s.sql.settings
}

// run calls fn under the reservation a holds and records its outcome.
func (s *Store) run(ctx context.Context, a *attempt, fn payloadFunc) (*commonpb.Payload, error) {
	k, token := a.call.Key, a.call.Key.Token()
	// An attempt that learns on a heartbeat that it lost the receipt is cancelled: it must not
	// go on calling the downstream beside the attempt that took over.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lease := &leaseHolder{store: s, key: k, reservation: a.reservation, lastExtend: time.Now(), cancel: cancel}
	ctx = withRunning(withLease(keys.WithToken(ctx, token), lease), s, a.call)

	if reason := a.unsafeToSend(); reason != "" {
		if a.call.Reconcile == nil {
			return settle(nil, s.finish(ctx, a, nil, &OutcomeUnknownError{Key: k, Token: token, Reason: reason}))
		}
		result, found, err := a.call.Reconcile(ctx, token)
		if err != nil {
			// Not knowing is not an outcome: the receipt keeps saying that an effect may have
			// happened, and the next attempt asks again.
			// This attempt sent nothing, so the settle time still counts from the end of the
			// attempt before it: the next attempt asks again at once, not a settle time later.
			a.obs.log("reconcile failed", "error", err)
			if _, rerr := s.release(ctx, a, true, time.Since(a.lastEnded)); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, &ReconcileError{Key: k, Token: token, Err: err}
		}
		if found {
			p, err := s.encode(k, result)
			if err != nil {
				return settle(nil, s.finish(ctx, a, nil, err))
			}
			return settle(p, s.finish(ctx, a, p, nil))
		}
		// The downstream has no effect under the token, and do waited out its settle time:
		// the earlier attempts had none. Asking took time: this attempt must still hold the
		// receipt before it calls, or another may have asked too, and both would call.
		a.effectPossible = false
		if err := lease.extend(ctx, s.leaseFor(ctx, a.call)); err != nil {
			var fenced *FencedOutError
			if errors.As(err, &fenced) {
				return nil, err
			}
			return nil, &StoreError{Op: "extend", Key: k, Err: err}
		}
	}

	failpoint.Hit(failpoint.AfterReserve)
	p, err := fn(ctx)
	failpoint.Hit(failpoint.AfterDownstream)
	if err == nil {
		err = s.checkSize(k, p)
	}
	if err != nil {
		p = nil
	}
	p, err = settle(p, s.finish(ctx, a, p, err))
	failpoint.Hit(failpoint.AfterComplete)
	return p, err
}

// settle turns finish's answer into the attempt's outcome: p when finish recorded success (nil
// error), what the newer attempt recorded when this one was fenced out, else the error.
func settle(p *commonpb.Payload, finishErr error) (*commonpb.Payload, error) {
	var fenced *fencedOut
	switch {
	case finishErr == nil:
		return p, nil
	case errors.As(finishErr, &fenced):
		return fenced.recorded.payload, fenced.recorded.err
	}
	return nil, finishErr
}

// finish records the outcome of attempt a and returns err, or the error that stopped it from
// recording. Final outcomes (a result, a non-retryable error) complete the receipt; retryable
// errors release the lease, keeping the token for the next attempt.
func (s *Store) finish(ctx context.Context, a *attempt, p *commonpb.Payload, err error) error {
	k := a.call.Key
	// The bookkeeping write must happen even when the activity's context was cancelled or timed
	// out just as the function returned: otherwise the outcome would be known only to a
	// takeover.
	wctx, cancel := s.writeContext(ctx)
	defer cancel()

	var (
		op      string
		written bool
		dbErr   error
	)
	if err != nil && !s.isFinal(ctx, err) {
		op = "release"
		written, dbErr = s.release(wctx, a, a.effectPossible || !IsNotApplied(err), 0)
	} else {
		op = "complete"
		out, encErr := s.outcome(k, p, err)
		if encErr != nil {
			return encErr
		}
		written, dbErr = s.completions.complete(wctx, &completion{key: k, reservation: a.reservation,
			fingerprint: a.call.Fingerprint, outcome: out})
	}
	if dbErr != nil {
		// The outcome is not recorded; the lease still stands, so the next attempt takes over
		// when it ends and calls again with the same token.
		a.obs.log("could not record outcome", "op", op, "error", dbErr)
		return &StoreError{Op: op, Key: k, Err: dbErr}
	}
	if !written {
		return s.fencedOut(wctx, a)
	}
	return err
}

// fencedOut is what an attempt that no longer holds its receipt returns: what the receipt
// records when it is finished — if it was recorded for this request — else a FencedOutError.
func (s *Store) fencedOut(ctx context.Context, a *attempt) error {
	k := a.call.Key
	a.obs.count(MetricFencedOut)
	a.obs.log("fenced out: another attempt holds this receipt")
	r, err := s.read(ctx, k)
	if err != nil || (r.state != StateCompleted && r.state != StateFailed) {
		return &FencedOutError{Key: k}
	}
	if r.fingerprint != a.call.Fingerprint {
		// The receipt was reserved again, for another request, after this attempt's
		// reservation was lost: its result is not this request's. The retry is told so
		// (PayloadMismatch) before it calls anything.
		return &FencedOutError{Key: k}
	}
	p, err := s.replay(k, r)
	return &fencedOut{recorded: &recorded{payload: p, err: err}}
}

// release ends a's lease after a retryable error, recording whether an effect may have
// happened, as of endedAgo: zero for an attempt that may have sent something, or how long ago
// the last attempt that may have sent something ended. It reports whether a still held the
// receipt.
func (s *Store) release(ctx context.Context, a *attempt, effectPossible bool, endedAgo time.Duration) (bool, error) {
	k := a.call.Key
	tag, err := s.exec(ctx, s.sql.release, k.Namespace, k.Tenant, k.Operation, k.ID, a.reservation.uuid(), effectPossible,
		newReservation().uuid(), endedAgo.Microseconds())
	return tag.RowsAffected() > 0, err
}

// writeContext is the context of a bookkeeping write after the function ran: detached from the
// activity's cancellation, bounded by the statement timeout (and a margin for the round trip).
func (s *Store) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StatementTimeout+time.Second)
}

type recorded struct {
	payload *commonpb.Payload
	err     error
}

// fencedOut carries what the newer attempt recorded back to run, which returns it as this
// attempt's outcome. finish returns it only with recorded set.
type fencedOut struct{ recorded *recorded }

func (e *fencedOut) Error() string { return "fenced out" }

// outcome is a final outcome as receipt columns.
type outcome struct {
	state           string
	result, failure []byte
	errType, errMsg *string
}

// size is roughly how many bytes the outcome adds to a statement.
func (o *outcome) size() int {
	n := 64 + len(o.result) + len(o.failure)
	if o.errType != nil {
		n += len(*o.errType)
	}
	if o.errMsg != nil {
		n += len(*o.errMsg)
	}
	return n
}

// outcome turns a final result or error into receipt columns. A result is stored as the payload
// the DataConverter made (sealed with Config.Codecs); a failure as the Temporal failure the SDK
// would send, so that a replay returns its type, message, details and cause.
func (s *Store) outcome(k keys.Key, p *commonpb.Payload, err error) (outcome, error) {
	if err == nil {
		var result []byte
		if p != nil {
			sealed, err := s.seal(p)
			if err == nil {
				result, err = proto.Marshal(sealed)
			}
			if err != nil {
				return outcome{}, fmt.Errorf("encode result for key %s: %w", k, err)
			}
		}
		return outcome{state: StateCompleted, result: result}, nil
	}
	f := s.failureOf(err)
	failure, encErr := proto.Marshal(f)
	if encErr != nil {
		return outcome{}, fmt.Errorf("encode failure for key %s: %w", k, encErr)
	}
	t := textOf(f.GetApplicationFailureInfo().GetType())
	m := textOf(f.GetMessage())
	return outcome{state: StateFailed, failure: failure, errType: &t, errMsg: &m}, nil
}

// failureOf returns the Temporal failure recorded for a final error, marked non-retryable: the
// receipt replays it to every later attempt.
func (s *Store) failureOf(err error) *failurepb.Failure {
	err = toTemporal(err)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		err = appErr
	}
	// An error that came from another failure carries it; clone it before marking it.
	f := proto.Clone(s.cfg.FailureConverter.ErrorToFailure(err)).(*failurepb.Failure)
	info := f.GetApplicationFailureInfo()
	if info == nil {
		info = &failurepb.ApplicationFailureInfo{Type: fmt.Sprintf("%T", err)}
		f.FailureInfo = &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: info}
	}
	info.NonRetryable = true
	info.NextRetryDelay = nil
	// Protobuf strings must be UTF-8: a message carrying bytes from the wire must not keep its
	// outcome from being recorded.
	for g := f; g != nil; g = g.GetCause() {
		g.Message, g.StackTrace = textOf(g.Message), textOf(g.StackTrace)
		if ai := g.GetApplicationFailureInfo(); ai != nil {
			ai.Type = textOf(ai.Type)
		}
	}
	return f
}

// textOf makes s storable in a text column, which refuses NUL and invalid UTF-8: an error
// message carrying bytes from the wire must not keep its outcome from being recorded (nor, in a
// batch, anyone else's). Each offending byte becomes U+FFFD.
func textOf(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// isFinal reports whether err ends the intent for good, so the receipt records it and replays
// it: a non-retryable application error, or one whose type the activity's retry policy lists as
// non-retryable. Everything else, ambiguous errors included, is retryable.
func (s *Store) isFinal(ctx context.Context, err error) bool {
	var appErr *temporal.ApplicationError
	if !errors.As(toTemporal(err), &appErr) {
		return false
	}
	if appErr.NonRetryable() {
		return true
	}
	if sdkactivity.IsActivity(ctx) {
		if rp := sdkactivity.GetInfo(ctx).RetryPolicy; rp != nil {
			return slices.Contains(rp.NonRetryableErrorTypes, appErr.Type())
		}
	}
	return false
}

// replay returns what a finished receipt of k recorded. A recorded failure comes back as the
// non-retryable application error first recorded: its type, message, details and cause. When it
// was one of this package's own, its typed error is the cause again, so errors.As finds it on
// every replay.
func (s *Store) replay(k keys.Key, r receipt) (*commonpb.Payload, error) {
	if r.state == StateFailed {
		return nil, s.replayFailure(k, r)
	}
	if r.result == nil {
		return nil, nil
	}
	p := new(commonpb.Payload)
	if err := proto.Unmarshal(r.result, p); err != nil {
		return nil, fmt.Errorf("decode recorded result for key %s: %w", k, err)
	}
	return s.open(p)
}

func (s *Store) replayFailure(k keys.Key, r receipt) error {
	var cause error
	switch deref(r.errType) {
	case ErrTypeOutcomeUnknown:
		cause = &OutcomeUnknownError{Key: k, Token: k.Token(), Reason: "recorded"}
	case ErrTypePayloadTooLarge:
		cause = &PayloadTooLargeError{Key: k, Limit: s.cfg.MaxPayloadBytes}
	}
	if cause == nil && r.failure != nil {
		f := new(failurepb.Failure)
		if err := proto.Unmarshal(r.failure, f); err == nil {
			return s.cfg.FailureConverter.FailureToError(f)
		}
	}
	return temporal.NewNonRetryableApplicationError(deref(r.errMessage), deref(r.errType), cause)
}

func (s *Store) read(ctx context.Context, k keys.Key) (receipt, error) {
	return s.readOn(ctx, s.receipts, k)
}

// readOn reads k's receipt through db: DoTx reads on the connection it already holds, since
// waiting for a second one from the pool could wait forever when every connection is held by a
// duplicate doing the same.
func (s *Store) readOn(ctx context.Context, db batcher, k keys.Key) (receipt, error) {
	return scanReceipt(s.queryRow(ctx, db, s.sql.settings, s.sql.read, k.Namespace, k.Tenant, k.Operation, k.ID))
}

// check validates a call before anything is written or called.
func (s *Store) check(c Call) error {
	if err := c.Key.Validate(); err != nil {
		return err
	}
	if c.Fingerprint.Version == 0 {
		return fmt.Errorf("key %s: %w: the call has no fingerprint; set Call.Fingerprint with keys.FingerprintOf", c.Key, keys.ErrNotCanonicalizable)
	}
	// ScheduledAt is stamped by the Temporal server and compared with this worker's clock: skew
	// of seconds against a retention of days does not matter.
	if !c.ScheduledAt.IsZero() && time.Since(c.ScheduledAt) > s.cfg.Retention {
		return &HorizonError{Key: c.Key, Scheduled: c.ScheduledAt, Retention: s.cfg.Retention}
	}
	return nil
}

func (s *Store) checkFingerprint(c Call, r receipt, obs observer) error {
	if r.fingerprint == c.Fingerprint {
		return nil
	}
	obs.count(MetricMismatched)
	return &MismatchError{Key: c.Key, Stored: r.fingerprint, Actual: c.Fingerprint}
}

func (s *Store) checkSize(k keys.Key, p *commonpb.Payload) error {
	if p != nil && proto.Size(p) > s.cfg.MaxPayloadBytes {
		return &PayloadTooLargeError{Key: k, Size: proto.Size(p), Limit: s.cfg.MaxPayloadBytes}
	}
	return nil
}

// encode turns a result into the payload a receipt stores. A nil result stores no payload.
func (s *Store) encode(k keys.Key, v any) (*commonpb.Payload, error) {
	if v == nil {
		return nil, nil
	}
	p, err := s.cfg.DataConverter.ToPayload(v)
	if err != nil {
		return nil, fmt.Errorf("encode result for key %s: %w", k, err)
	}
	return p, s.checkSize(k, p)
}

// leaseFor is how long an attempt holds a key: the call's lease, else until the activity's
// deadline (start-to-close or schedule-to-close, whichever ends first), else LeaseDefault. With a
// heartbeat timeout the lease is the heartbeat timeout, and each heartbeat extends it.
func (s *Store) leaseFor(ctx context.Context, c Call) time.Duration {
	if c.Lease > 0 {
		return c.Lease
	}
	lease := LeaseDefault
	if d, ok := ctx.Deadline(); ok {
		lease = max(time.Until(d), time.Millisecond)
	}
	if sdkactivity.IsActivity(ctx) {
		if hb := sdkactivity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
			lease = min(lease, hb)
		}
	}
	return lease
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
