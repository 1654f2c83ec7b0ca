// Receipts as the state machines read and write them: the row, the outcome columns, replays, and
// the checks every path makes before it writes. Do (do.go) and the transactional forms (dotx.go)
// share them.

package engine

import (
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

	"github.com/tempotent/tempotent/internal/errtype"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
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
	// compensatedBy is the token of a completed compensation of this receipt's step, and
	// compensatedAt when it completed; empty when there is none (compensatedBy in sql.go).
	compensatedBy keys.Token
	compensatedAt time.Time
}

func scanReceipt(row pgx.Row) (receipt, error) {
	// One value holds the row and every scan target, so that scanning costs one allocation for
	// them all (pointers passed to Scan escape), and the nullable columns go into pgtype's
	// values, which pgx fills in place, not into pointers it allocates for each row.
	var sc struct {
		r         receipt
		fp        []byte
		fpVersion pgtype.Int2
		leaseUS   pgtype.Int8
		ageUS     int64
		state     pgtype.Text
		compBy    pgtype.Text
		compAt    pgtype.Timestamptz
	}
	r := &sc.r
	err := row.Scan(&r.inserted, &r.fence, &r.reservation, &sc.fp, &sc.fpVersion, &sc.state, &r.result, &r.failure,
		&r.errType, &r.errMessage, &sc.leaseUS, &r.effectPossible, &sc.ageUS, &sc.compBy, &sc.compAt)
	if err != nil {
		return *r, err
	}
	if sc.compBy.Valid {
		r.compensatedBy = keys.Token(sc.compBy.String)
	}
	if sc.compAt.Valid {
		r.compensatedAt = sc.compAt.Time
	}
	if sc.fpVersion.Valid {
		r.fingerprint.Version = sc.fpVersion.Int16
		copy(r.fingerprint.Sum[:], sc.fp)
	}
	if sc.state.Valid {
		r.state = sc.state.String
	}
	if sc.leaseUS.Valid {
		r.lease = time.Duration(sc.leaseUS.Int64) * time.Microsecond
	}
	r.age = time.Duration(sc.ageUS) * time.Microsecond
	return *r, nil
}

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
		result, err := schema.EncodeResult(s.cfg.Codecs, p)
		if err != nil {
			return outcome{}, fmt.Errorf("encode result for %s: %w", ref(k), err)
		}
		return outcome{state: schema.StateCompleted, result: result}, nil
	}
	f := s.failureOf(err)
	failure, encErr := proto.Marshal(f)
	if encErr != nil {
		return outcome{}, fmt.Errorf("encode failure for %s: %w", ref(k), encErr)
	}
	t := textOf(f.GetApplicationFailureInfo().GetType())
	m := textOf(f.GetMessage())
	return outcome{state: schema.StateFailed, failure: failure, errType: &t, errMsg: &m}, nil
}

// failureOf returns the Temporal failure recorded for a final error, marked non-retryable: the
// receipt replays it to every later attempt.
func (s *Store) failureOf(err error) *failurepb.Failure {
	err = ToTemporal(err)
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

// IsFinal reports whether err ends the intent for good, so the receipt records it and replays
// it: a non-retryable application error, or one whose type the activity's retry policy lists as
// non-retryable. Everything else, ambiguous errors included, is retryable.
func (s *Store) IsFinal(ctx context.Context, err error) bool {
	var appErr *temporal.ApplicationError
	if !errors.As(ToTemporal(err), &appErr) {
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
	if r.state == schema.StateFailed {
		return nil, s.replayFailure(k, r)
	}
	if r.result == nil {
		return nil, nil
	}
	p, err := schema.DecodeResult(s.cfg.Codecs, r.result)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref(k), err)
	}
	return p, nil
}

func (s *Store) replayFailure(k keys.Key, r receipt) error {
	var cause error
	switch deref(r.errType) {
	case errtype.OutcomeUnknown:
		cause = &OutcomeUnknownError{Key: k, Token: k.Token(), Reason: "recorded"}
	case errtype.PayloadTooLarge:
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

// readOn reads k's receipt through db: DoInNewTx reads on the connection it already holds, since
// waiting for a second one from the pool could wait forever when every connection is held by a
// duplicate doing the same.
func (s *Store) readOn(ctx context.Context, db batcher, k keys.Key) (receipt, error) {
	return scanReceipt(s.queryRow(ctx, db, s.sql.settings, s.sql.read, k.Namespace, k.Tenant, k.Operation, k.ID))
}

// check validates a call before anything is written or called, and fingerprints its Request
// when it has no Fingerprint.
func (s *Store) check(c *Call) error {
	if err := c.Key.Validate(); err != nil {
		return err
	}
	if c.Fingerprint.Version == 0 && c.Request != nil {
		fp, err := keys.FingerprintOf(c.Request)
		if err != nil {
			return fmt.Errorf("%s: %w", ref(c.Key), err)
		}
		c.Fingerprint = fp
	}
	if c.Fingerprint.Version == 0 {
		return fmt.Errorf("%s: %w: the call has no fingerprint; set Call.Request (or Call.Fingerprint with keys.FingerprintOf)", ref(c.Key), keys.ErrNotCanonicalizable)
	}
	s.keyFingerprint(c)
	// ScheduledAt is stamped by the Temporal server and compared with this worker's clock: skew
	// of seconds against a retention of days does not matter.
	if !c.ScheduledAt.IsZero() && time.Since(c.ScheduledAt) > s.cfg.Retention {
		return &HorizonError{Key: c.Key, Scheduled: c.ScheduledAt, Retention: s.cfg.Retention}
	}
	return nil
}

// checkFingerprint refuses a receipt recorded for another request. A receipt recorded under an
// older fingerprint version is compared under that version when the call still has its request
// (Register, RegisterTx, ForEach and a Call with Request do), so that an upgrade does not turn
// the retries of intents in flight into mismatches; so is one recorded before the store's
// fingerprint key was turned on, or under an older key (see fingerprintMatches). A matching
// receipt's fingerprint becomes c's, so that an attempt that takes it over completes it under
// the form it was recorded with.
func (s *Store) checkFingerprint(c *Call, r receipt, obs observer) error {
	if s.fingerprintMatches(*c, r.fingerprint) {
		c.Fingerprint = r.fingerprint
		return nil
	}
	obs.count(telemetry.ReceiptMismatched)
	return &MismatchError{Key: c.Key, Stored: r.fingerprint, Actual: c.Fingerprint}
}

// checkCompensated refuses a receipt whose step was compensated: an attempt of a forward step
// that finds the step's compensation completed must neither run (take the receipt over and call
// the downstream again, or reconcile) nor replay a result as if the step stood. Only a workflow
// reset to before the step meets this (workflow-scope keys survive a reset), after the saga that
// compensated it ended. A failed receipt replays its failure as ever: it claims no effect that
// was undone.
func checkCompensated(c Call, r receipt, obs observer) error {
	if r.compensatedBy == "" || r.state == schema.StateFailed {
		return nil
	}
	obs.log("refused: the step was compensated", "compensation", r.compensatedBy)
	return &CompensatedError{Key: c.Key, Token: c.Key.Token(), Compensation: r.compensatedBy, At: r.compensatedAt}
}

func (s *Store) checkSize(k keys.Key, p *commonpb.Payload) error {
	if p != nil && proto.Size(p) > s.cfg.MaxPayloadBytes {
		return &PayloadTooLargeError{Key: k, Size: proto.Size(p), Limit: s.cfg.MaxPayloadBytes}
	}
	return nil
}

// Encode turns a result into the payload a receipt stores. A nil result stores no payload.
func (s *Store) Encode(k keys.Key, v any) (*commonpb.Payload, error) {
	if v == nil {
		return nil, nil
	}
	p, err := s.cfg.DataConverter.ToPayload(v)
	if err != nil {
		return nil, fmt.Errorf("encode result for %s: %w", ref(k), err)
	}
	return p, s.checkSize(k, p)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
