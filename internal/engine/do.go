package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// PayloadFunc is the function a receipt protects, returning its result as the payload to store.
type PayloadFunc func(ctx context.Context) (*commonpb.Payload, error)

// Do runs the external-effect state machine of the module's DESIGN.md for one call: activity.Do
// without the result's type, which fn has already encoded.
func (s *Store) Do(ctx context.Context, c Call, fn PayloadFunc) (_ *commonpb.Payload, err error) {
	if err := s.check(&c); err != nil {
		return nil, err
	}
	// Before the first receipt statement: a refused first run reserves nothing, and a refused
	// replay is handed nothing and changes nothing.
	if !c.authorized {
		if err := s.authorize(ctx, c); err != nil {
			return nil, err
		}
	}
	// The reserve span ends where the attempt goes on to run or replay, or fails.
	_, reserving := s.startSpan(ctx, telemetry.SpanReserve, c.Key)
	defer func() { reserving.end(err) }()
	k, lease := c.Key, s.leaseFor(ctx, c)
	// Leases and retention are measured on the database clock (now() in every statement); only
	// their lengths come from here.
	obs := newObserver(ctx, s, k)
	c.origin = originOf(ctx)

	res := newReservation()
	var (
		r          receipt
		reservedAt time.Time
		// took is the fence readTakeOver took the receipt over with, under res, or nil.
		took *int64
	)
	if h := c.held; h != nil {
		// The statement of the item's chunk wrote this reservation, or found this receipt.
		res, r, reservedAt = h.reservation, h.receipt, h.sent
	} else {
		retry := replayLikely(ctx, c)
		switch {
		case retry && c.runsAgain(s.cfg.Retention):
			// A batch's retry: an unfinished batch released its receipt, so a takeover is
			// likely, and readTakeOver reads and takes over in one statement. A finished
			// receipt it answers as the plain lookup does.
			r, took, err = s.readTakeOver(ctx, c, res, lease)
		case retry:
			// A retry: a finished receipt is likely, and the plain lookup answers it alone. No
			// receipt (or a failed read) goes on to reserve, which tells again.
			r, err = s.readPlain(ctx, k)
		}
		if !retry || err != nil {
			res = newReservation() // a lost reply may have taken the receipt over under the last one
			r, err = s.reserve(ctx, c, res, lease)
		}
		if err != nil {
			return nil, &StoreError{Op: "reserve", Key: k, Err: err}
		}
	}
	if r.inserted {
		obs.count(telemetry.ReceiptReserved)
		reserving.end(nil)
		return s.run(ctx, &attempt{call: c, reservation: res, obs: obs, reservedAt: reservedAt}, fn)
	}

	// At most a few rounds: each round either answers, or lost a takeover race to an attempt
	// that changed the row.
	for range 3 {
		if err := s.checkFingerprint(&c, r, obs); err != nil {
			return nil, err
		}
		if err := checkCompensated(c, r, obs); err != nil {
			return nil, err
		}
		switch r.state {
		case schema.StateCompleted, schema.StateFailed:
			obs.count(telemetry.ReceiptReplayed)
			reserving.end(nil)
			_, replaying := s.startSpan(ctx, telemetry.SpanReplay, k)
			p, err := s.replay(k, r)
			replaying.end(err)
			return p, err
		}
		if r.lease > 0 {
			if finished, ok := s.await(ctx, k, r); ok {
				r = finished
				continue
			}
			obs.count(telemetry.ReceiptInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: s.inProgressDelay(r.lease)}
		}
		a := &attempt{call: c, reservation: newReservation(), obs: obs, effectPossible: r.effectPossible, age: r.age,
			lastEnded: time.Now().Add(r.lease)}
		if wait := a.settling(-r.lease); wait > 0 {
			// The attempt before may have sent a request that the downstream has not applied
			// yet, and asking it now could hear "not found" for an effect that is on its way.
			obs.count(telemetry.ReceiptInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: s.retryAfter(wait)}
		}
		var (
			fence, ageUS int64
			err          error
		)
		if took != nil {
			// readTakeOver took it over as of the receipt r it read (its age is the takeover's):
			// it checked in SQL what this loop checked above.
			a.reservation, fence, ageUS, took = res, *took, r.age.Microseconds(), nil
		} else {
			err = s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.takeOver, k.Namespace, k.Tenant, k.Operation, k.ID, r.reservation,
				a.reservation.uuid(), lease.Microseconds(), s.cfg.Retention.Microseconds()).Scan(&fence, &ageUS)
		}
		if err == nil {
			a.age = time.Duration(ageUS) * time.Microsecond
			obs.count(telemetry.ReceiptTakenOver)
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
	// reservedAt is when the statement that wrote the reservation was sent, for a reservation
	// written ahead of the call (a ForEach chunk's): its lease counts from then. Zero means now.
	reservedAt time.Time
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
