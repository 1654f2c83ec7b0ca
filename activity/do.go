package activity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
)

// payloadFunc is the function a receipt protects, returning its result as the payload to store.
type payloadFunc func(ctx context.Context) (*commonpb.Payload, error)

// do runs the external-effect state machine of the module's DESIGN.md for one call.
func (s *Store) do(ctx context.Context, c Call, fn payloadFunc) (_ *commonpb.Payload, err error) {
	if err := s.check(&c); err != nil {
		return nil, err
	}
	// The reserve span ends where the attempt goes on to run or replay, or fails.
	_, reserving := s.startSpan(ctx, SpanReserve, c.Key)
	defer func() { reserving.end(err) }()
	k, lease := c.Key, s.leaseFor(ctx, c)
	// Leases and retention are measured on the database clock (now() in every statement); only
	// their lengths come from here.
	obs := newObserver(ctx, s, k)
	c.origin = originOf(ctx)

	res := newReservation()
	var r receipt
	retry := replayLikely(ctx, c)
	if retry {
		// A retry: a finished receipt is likely, and the plain lookup answers it alone. No receipt
		// (or a failed read) goes on to reserve, which tells again.
		r, err = s.readPlain(ctx, k)
	}
	if !retry || err != nil {
		r, err = s.reserve(ctx, c, res, lease)
	}
	if err != nil {
		return nil, &StoreError{Op: "reserve", Key: k, Err: err}
	}
	if r.inserted {
		obs.count(MetricReserved)
		reserving.end(nil)
		return s.run(ctx, &attempt{call: c, reservation: res, obs: obs}, fn)
	}

	// At most a few rounds: each round either answers, or lost a takeover race to an attempt
	// that changed the row.
	for range 3 {
		if err := s.checkFingerprint(c, r, obs); err != nil {
			return nil, err
		}
		if err := checkCompensated(c, r, obs); err != nil {
			return nil, err
		}
		switch r.state {
		case schema.StateCompleted, schema.StateFailed:
			obs.count(MetricReplayed)
			reserving.end(nil)
			_, replaying := s.startSpan(ctx, SpanReplay, k)
			p, err := s.replay(k, r)
			replaying.end(err)
			return p, err
		}
		if r.lease > 0 {
			if finished, ok := s.await(ctx, k, r); ok {
				r = finished
				continue
			}
			obs.count(MetricInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: s.inProgressDelay(r.lease)}
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
			reserving.end(nil)
			return s.run(ctx, a, fn)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, &StoreError{Op: "take over", Key: k, Err: err}
		}
		if r, err = s.read(ctx, k); err != nil {
			return nil, &StoreError{Op: "read", Key: k, Err: err}
		}
	}
	return nil, &InProgressError{Key: k, RetryAfter: s.inProgressDelay(0)}
}

// reserve inserts a pending receipt for c under reservation res, or returns the one already there.
func (s *Store) reserve(ctx context.Context, c Call, res reservation, lease time.Duration) (r receipt, err error) {
	for range 2 {
		r, err = s.reservations.reserve(ctx, &reserveReq{call: c, reservation: res, lease: lease})
		if errors.Is(err, pgx.ErrNoRows) {
			// A concurrent attempt's receipt, committed after this statement's snapshot. It can
			// be gone again by the time it is read (its reservation lost in a crash): reserve
			// once more.
			r, err = s.read(ctx, c.Key)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	return r, err
}

// retryAfter is the next-retry delay of an InProgressError when the key is busy for wait more.
func (s *Store) retryAfter(wait time.Duration) time.Duration {
	return min(max(wait, 100*time.Millisecond), s.cfg.InProgressDelayMax)
}

// inProgressDelay is the next-retry delay of a duplicate that found another attempt holding the
// key for wait more: retryAfter's, with full jitter. The duplicates of one intent (a workflow
// that scheduled the same key many times, retries that raced) would otherwise all retry at the
// same moment and meet the holder, or each other, together again. A settle wait is not
// jittered (retryAfter alone): a retry before it ends would only be told to wait again.
func (s *Store) inProgressDelay(wait time.Duration) time.Duration {
	return fullJitter(s.retryAfter(wait))
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
		case <-time.After(fullJitter(delay)): // duplicates that wait together read apart
		}
		next, err := s.read(ctx, k)
		if err != nil {
			return r, false // the caller's InProgressError leads to a retry that reads again
		}
		if next.state != schema.StatePending || next.lease <= 0 {
			return next, true
		}
	}
	return r, false
}

// run calls fn under the reservation a holds and records its outcome.
func (s *Store) run(ctx context.Context, a *attempt, fn payloadFunc) (*commonpb.Payload, error) {
	k, token := a.call.Key, a.call.Key.Token()
	// An attempt that learns on a heartbeat that it lost the receipt is cancelled: it must not
	// go on calling the downstream beside the attempt that took over.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lease := &leaseHolder{store: s, key: k, reservation: a.reservation, lastExtend: time.Now(), cancel: cancel}
	lease.ends.Store(lease.lastExtend.Add(s.leaseFor(ctx, a.call)).UnixNano())
	if items := itemLeasesFrom(ctx); items != nil {
		defer items.hold(lease)() // an item of a ForEach batch: heartbeats extend its lease too
	}
	ctx = withRunning(withLease(keys.WithToken(ctx, token), lease), s, a.call)

	if reason := a.unsafeToSend(); reason != "" {
		if a.call.Reconcile == nil {
			return settle(nil, s.finish(ctx, a, nil, &OutcomeUnknownError{Key: k, Token: token, Reason: reason}))
		}
		rctx, reconciling := s.startSpan(ctx, SpanReconcile, k)
		result, found, err := a.call.Reconcile(rctx, token)
		reconciling.end(err)
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
	cctx, calling := s.startSpan(ctx, SpanCall, k)
	p, err := fn(cctx)
	calling.end(err)
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
func (s *Store) finish(ctx context.Context, a *attempt, p *commonpb.Payload, err error) (ferr error) {
	k := a.call.Key
	_, completing := s.startSpan(ctx, SpanComplete, k)
	defer func() {
		stepErr := ferr
		if stepErr == err {
			stepErr = nil // the attempt's own error is the call span's, not this step's
		}
		completing.end(stepErr)
	}()
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
		comp := &completion{key: k, reservation: a.reservation, fingerprint: a.call.Fingerprint, outcome: out}
		if l := leaseFrom(ctx); l != nil {
			comp.retryUntil = l.endsAt()
		}
		written, dbErr = s.completions.complete(wctx, comp)
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
	if err != nil || (r.state != schema.StateCompleted && r.state != schema.StateFailed) {
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
// Make it just before the write is sent, never before the function runs: its deadline counts
// from when it is made, and a function slower than it would leave no time for the write.
func (s *Store) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.statementContext(context.WithoutCancel(ctx))
}

// statementContext bounds one receipt statement sent under ctx, as writeContext does, without
// detaching it from ctx's cancellation: for the statements before the function runs.
func (s *Store) statementContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.StatementTimeout+time.Second)
}

// writeOn runs one bookkeeping write under a writeContext of its own.
func (s *Store) writeOn(ctx context.Context, write func(context.Context) error) error {
	wctx, cancel := s.writeContext(ctx)
	defer cancel()
	return write(wctx)
}

type recorded struct {
	payload *commonpb.Payload
	err     error
}

// fencedOut carries what the newer attempt recorded back to run, which returns it as this
// attempt's outcome. finish returns it only with recorded set.
type fencedOut struct{ recorded *recorded }

func (e *fencedOut) Error() string { return "fenced out" }

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
