package activity

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/keys"
)

// Call describes one execution of an intent for Do and DoTx. Wrap, WrapTx and the interceptor
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
	// token (Stripe and the downstream package's providers do).
	DownstreamDeduplicates bool
	// Reconcile, for a downstream that does not deduplicate, asks it what an earlier attempt
	// did under the token after a takeover. Without it (and without DownstreamDeduplicates),
	// such a takeover fails with OutcomeUnknownError instead of guessing.
	Reconcile ReconcileFunc
}

// ReconcileFunc asks the downstream what happened under token. It returns the result the
// earlier attempt produced and found = true when the effect happened; found = false when it
// certainly did not (the function is then called); or an error, which is retried.
type ReconcileFunc func(ctx context.Context, token keys.Token) (result any, found bool, err error)

// Receipt states.
const (
	StatePending   = "pending"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// receipt is a receipts row as the state machine needs it.
type receipt struct {
	inserted       bool
	fence          int64
	fingerprint    keys.Fingerprint
	state          string
	result         []byte
	errType        *string
	errMessage     *string
	leaseRemaining time.Duration
	effectPossible bool
}

func scanReceipt(row pgx.Row) (receipt, error) {
	var (
		r         receipt
		fp        []byte
		fpVersion *int16
		leaseUS   *int64
		state     *string
	)
	err := row.Scan(&r.inserted, &r.fence, &fp, &fpVersion, &state, &r.result, &r.errType, &r.errMessage, &leaseUS, &r.effectPossible)
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
		r.leaseRemaining = time.Duration(*leaseUS) * time.Microsecond
	}
	return r, nil
}

type payloadFunc func(ctx context.Context) (*commonpb.Payload, error)

// do runs the external-effect state machine of DESIGN.md for one call.
func (s *Store) do(ctx context.Context, c Call, fn payloadFunc) (*commonpb.Payload, error) {
	if err := s.check(c); err != nil {
		return nil, err
	}
	k, lease := c.Key, s.leaseFor(ctx, c)
	// Leases and retention are measured on the database clock (now() in every statement); only
	// their lengths come from here.
	token := k.Token()
	obs := newObserver(ctx, s, k)

	r, err := scanReceipt(s.db.QueryRow(ctx, s.reserveStatement(c), k.Namespace, k.Tenant, k.Operation, k.ID,
		string(token), c.Fingerprint.Sum[:], c.Fingerprint.Version, lease.Microseconds(), s.cfg.Retention.Microseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		r, err = s.read(ctx, k) // the concurrent winner's receipt, now committed
	}
	if err != nil {
		return nil, &StoreError{Op: "reserve", Key: k, Err: err}
	}
	if r.inserted {
		obs.count(MetricReserved)
		return s.run(ctx, c, r.fence, false, obs, fn)
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
		if r.leaseRemaining > 0 {
			if finished, ok := s.await(ctx, k, r); ok {
				r = finished
				continue
			}
			obs.count(MetricInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: min(max(r.leaseRemaining, 100*time.Millisecond), s.cfg.InProgressDelayMax)}
		}
		var fence int64
		err := s.db.QueryRow(ctx, s.sql.takeOver, k.Namespace, k.Tenant, k.Operation, k.ID, r.fence,
			lease.Microseconds(), s.cfg.Retention.Microseconds()).Scan(&fence)
		if err == nil {
			obs.count(MetricTakenOver)
			obs.log("took over a receipt whose lease ended", "fence", fence, "effect_possible", r.effectPossible)
			return s.run(ctx, c, fence, r.effectPossible, obs, fn)
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

// await watches a receipt that a live attempt holds until the attempt finishes or its lease
// ends, for at most InProgressWait. It returns the receipt as it then is and true, or false when
// the attempt is still running.
func (s *Store) await(ctx context.Context, k keys.Key, r receipt) (receipt, bool) {
	deadline := time.Now().Add(min(s.cfg.InProgressWait, r.leaseRemaining))
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
		if next.state != StatePending || next.leaseRemaining <= 0 {
			return next, true
		}
	}
	return r, false
}

// reserveStatement picks how durably a new reservation commits. The completion that follows it
// always commits durably, and its WAL flush carries the reservation's records with it, so a first
// execution waits for one flush, not two. The reservation alone is lost only if Postgres crashes
// (or fails over) in the moment between the two, before its WAL writer flushed (within
// 3 × wal_writer_delay). The attempt's completion then fails, and the retry finds no receipt and
// calls the downstream again with the same token: harmless exactly when the downstream
// deduplicates on that token, so only then is the reservation asynchronous. For any other
// downstream, the durable reservation is what lets a retry know an effect may have happened.
func (s *Store) reserveStatement(c Call) string {
	if c.DownstreamDeduplicates {
		return s.sql.reserveAsync
	}
	return s.sql.reserve
}

// run calls fn under the fence this attempt holds and records its outcome. unknown says that an
// earlier attempt may already have had the effect.
func (s *Store) run(ctx context.Context, c Call, fence int64, unknown bool, obs observer, fn payloadFunc) (*commonpb.Payload, error) {
	k, token := c.Key, c.Key.Token()
	lease := &leaseHolder{store: s, key: k, fence: fence, lastExtend: time.Now()}
	ctx = withLease(keys.WithToken(ctx, token), lease)

	if unknown && !c.DownstreamDeduplicates {
		if c.Reconcile == nil {
			return settle(nil, s.finish(ctx, c, fence, nil, &OutcomeUnknownError{Key: k, Token: token}, obs))
		}
		result, found, err := c.Reconcile(ctx, token)
		if err != nil {
			return settle(nil, s.finish(ctx, c, fence, nil, fmt.Errorf("reconcile token %s: %w", token, err), obs))
		}
		if found {
			p, err := s.encode(k, result)
			if err != nil {
				return settle(nil, s.finish(ctx, c, fence, nil, err, obs))
			}
			return settle(p, s.finish(ctx, c, fence, p, nil, obs))
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
	p, err = settle(p, s.finish(ctx, c, fence, p, err, obs))
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

// finish records the outcome of an attempt that holds fence and returns err, or the error that
// stopped it from recording. Final outcomes (a result, a non-retryable error) complete the
// receipt; retryable errors release the lease, keeping the token for the next attempt.
func (s *Store) finish(ctx context.Context, c Call, fence int64, p *commonpb.Payload, err error, obs observer) error {
	k := c.Key
	// The bookkeeping write must happen even when the activity's context was cancelled or timed
	// out just as the function returned: otherwise the outcome would be known only to a
	// takeover.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()

	var (
		op      string
		written bool
		dbErr   error
	)
	if err != nil && !s.isFinal(ctx, err) {
		op = "release"
		var tag pgconn.CommandTag
		tag, dbErr = s.db.Exec(wctx, s.sql.release, k.Namespace, k.Tenant, k.Operation, k.ID, fence, !IsNotApplied(err))
		written = tag.RowsAffected() > 0
	} else {
		op = "complete"
		state, result, errType, errMsg, encErr := s.outcome(k, p, err)
		if encErr != nil {
			return encErr
		}
		written, dbErr = s.completions.complete(wctx, &completion{key: k, fence: fence,
			state: state, result: result, errType: errType, errMsg: errMsg})
	}
	if dbErr != nil {
		// The outcome is not recorded; the lease still stands, so the next attempt takes over
		// when it ends and calls again with the same token.
		obs.log("could not record outcome", "op", op, "error", dbErr)
		return &StoreError{Op: op, Key: k, Err: dbErr}
	}
	if !written {
		obs.count(MetricFencedOut)
		obs.log("fenced out: a newer attempt took over this receipt", "fence", fence)
		r, rerr := s.read(wctx, k)
		if rerr == nil && (r.state == StateCompleted || r.state == StateFailed) {
			p, rerr := s.replay(k, r)
			return &fencedOut{recorded: &recorded{payload: p, err: rerr}}
		}
		return &FencedOutError{Key: k}
	}
	return err
}

type recorded struct {
	payload *commonpb.Payload
	err     error
}

// fencedOut carries what the newer attempt recorded back to run, which returns it as this
// attempt's outcome. finish returns it only with recorded set.
type fencedOut struct{ recorded *recorded }

func (e *fencedOut) Error() string { return "fenced out" }

// outcome turns a final result or error into receipt columns.
func (s *Store) outcome(k keys.Key, p *commonpb.Payload, err error) (state string, result []byte, errType, errMsg *string, encErr error) {
	if err == nil {
		if p != nil {
			if result, encErr = proto.Marshal(p); encErr != nil {
				return "", nil, nil, nil, fmt.Errorf("encode result for key %s: %w", k, encErr)
			}
		}
		return StateCompleted, result, nil, nil, nil
	}
	t, m := failureOf(toTemporal(err))
	t, m = textOf(t), textOf(m)
	return StateFailed, nil, &t, &m, nil
}

// textOf makes s storable in a text column, which refuses NUL and invalid UTF-8: an error
// message carrying bytes from the wire must not keep its outcome from being recorded (nor, in a
// batch, anyone else's). Each offending byte becomes U+FFFD.
func textOf(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// failureOf returns the application error type and message recorded for a final error.
func failureOf(err error) (string, string) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type(), appErr.Message()
	}
	return fmt.Sprintf("%T", err), err.Error()
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

// replay returns what a finished receipt of k recorded. A recorded failure comes back as a
// non-retryable application error of the recorded type and message; when it was one of this
// package's own, its typed error is the cause again, so errors.As finds it on every replay.
func (s *Store) replay(k keys.Key, r receipt) (*commonpb.Payload, error) {
	if r.state == StateFailed {
		var cause error
		switch deref(r.errType) {
		case ErrTypeOutcomeUnknown:
			cause = &OutcomeUnknownError{Key: k, Token: k.Token()}
		case ErrTypePayloadTooLarge:
			cause = &PayloadTooLargeError{Key: k, Limit: s.cfg.MaxPayloadBytes}
		}
		return nil, temporal.NewNonRetryableApplicationError(deref(r.errMessage), deref(r.errType), cause)
	}
	if r.result == nil {
		return nil, nil
	}
	p := new(commonpb.Payload)
	if err := proto.Unmarshal(r.result, p); err != nil {
		return nil, fmt.Errorf("decode recorded result: %w", err)
	}
	return p, nil
}

func (s *Store) read(ctx context.Context, k keys.Key) (receipt, error) {
	return s.readOn(ctx, s.db, k)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readOn reads k's receipt through q: DoTx reads on the connection it already holds, since
// waiting for a second one from the pool could wait forever when every connection is held by a
// duplicate doing the same.
func (s *Store) readOn(ctx context.Context, q querier, k keys.Key) (receipt, error) {
	return scanReceipt(q.QueryRow(ctx, s.sql.read, k.Namespace, k.Tenant, k.Operation, k.ID))
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
