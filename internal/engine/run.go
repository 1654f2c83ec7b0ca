// An attempt that holds its receipt: run calls the function (or reconciles first), finish records
// the outcome or releases the lease, and a fenced-out attempt answers with what the attempt that
// took over recorded.

package engine

import (
	"context"
	"errors"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// run calls fn under the reservation a holds and records its outcome.
func (s *Store) run(ctx context.Context, a *attempt, fn PayloadFunc) (*commonpb.Payload, error) {
	k, token := a.call.Key, a.call.Key.Token()
	// An attempt that learns on a heartbeat that it lost the receipt is cancelled: it must not
	// go on calling the downstream beside the attempt that took over.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	if !a.reservedAt.IsZero() {
		start = a.reservedAt
	}
	lease := &leaseHolder{store: s, key: k, reservation: a.reservation, lastExtend: start, cancel: cancel}
	lease.ends.Store(lease.lastExtend.Add(s.leaseFor(ctx, a.call)).UnixNano())
	if items := itemLeasesFrom(ctx); items != nil {
		defer items.hold(lease)() // an item of a ForEach batch: heartbeats extend its lease too
	}
	ctx = withRunning(withLease(keys.WithToken(ctx, token), lease), s, a.call)

	if reason := a.unsafeToSend(); reason != "" {
		if a.call.Reconcile == nil {
			return settle(nil, s.finish(ctx, a, nil, &OutcomeUnknownError{Key: k, Token: token, Reason: reason}))
		}
		rctx, reconciling := s.startSpan(ctx, telemetry.SpanReconcile, k)
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
			p, err := s.Encode(k, result)
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
	cctx, calling := s.startSpan(ctx, telemetry.SpanCall, k)
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
	_, completing := s.startSpan(ctx, telemetry.SpanComplete, k)
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
	if err != nil && !s.IsFinal(ctx, err) {
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
	a.obs.count(telemetry.ReceiptFencedOut)
	a.obs.log("fenced out: another attempt holds this receipt")
	r, err := s.read(ctx, k)
	if err != nil || (r.state != schema.StateCompleted && r.state != schema.StateFailed) {
		return &FencedOutError{Key: k}
	}
	if !a.call.Fingerprint.Matches(r.fingerprint) {
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
// deadline (start-to-close or schedule-to-close, whichever ends first), else leaseDefault. With a
// heartbeat timeout the lease is the heartbeat timeout, and each heartbeat extends it.
func (s *Store) leaseFor(ctx context.Context, c Call) time.Duration {
	if c.Lease > 0 {
		return c.Lease
	}
	lease := leaseDefault
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
