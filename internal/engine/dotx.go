package engine

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/telemetry"
)

// TxFunc is the function of the transactional paths: PayloadFunc, writing through tx.
type TxFunc func(ctx context.Context, tx pgx.Tx) (*commonpb.Payload, error)

// DoInNewTx runs the local-mutation path (activity.DoInNewTx): the receipt and the caller's writes commit in one
// transaction, so the local effect happens exactly once.
//
// Round trips: as many as the caller's own transaction. BEGIN and the read of an existing receipt
// go in one round trip (a finished receipt is replayed without running fn), and the receipt's
// INSERT goes in the same round trip as COMMIT. A concurrent duplicate that passed the read too
// blocks on the receipts' unique index at that INSERT until the first commits; its INSERT then
// fails, which turns its COMMIT into a rollback of its business writes, and it replays the first
// one's receipt.
func (s *Store) DoInNewTx(ctx context.Context, c Call, fn TxFunc) (*commonpb.Payload, error) {
	if err := s.check(&c); err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, c); err != nil { // before the read that could replay
		return nil, err
	}
	c.origin = originOf(ctx)
	k := c.Key
	obs := newObserver(ctx, s, k)

	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return nil, &StoreError{Op: "begin", Key: k, Err: err}
	}
	defer conn.Release()
	// The transaction's lock timeout holds for fn's statements too, so that a duplicate never
	// waits on locks that a stalled attempt holds; and a stalled attempt (a paused worker) loses
	// its open transaction, and its locks, once its lease is over.
	//
	// With tenant fences the transaction is READ COMMITTED whatever the role's or database's
	// default_transaction_isolation: its statements refuse any other level (fences.readCommitted).
	begin := &pgx.Batch{}
	var opts pgx.TxOptions
	if s.cfg.TenantFences {
		opts.IsoLevel = pgx.ReadCommitted
	}
	begin.BeginTx(opts)
	begin.Queue(s.sql.txSettings, s.lockTimeout, strconv.FormatInt(max(s.leaseFor(ctx, c).Milliseconds(), 1), 10))
	begin.Queue(s.sql.read, k.Namespace, k.Tenant, k.Operation, k.ID)
	// The receipt's own statements are bounded from when they are sent; fn's statements are
	// not (the lock timeout and the activity's deadline bound them).
	bctx, cancelBegin := s.statementContext(ctx)
	defer cancelBegin()
	results := conn.Conn().SendBatch(bctx, begin)
	tx := results.Tx()
	_, beginErr := results.Exec()
	if beginErr == nil {
		_, beginErr = results.Exec()
	}
	r, readErr := scanReceipt(results.QueryRow())
	if err := errors.Join(beginErr, results.Close()); err != nil {
		_ = tx.Rollback(ctx)
		return nil, &StoreError{Op: "begin", Key: k, Err: err}
	}
	if readErr == nil {
		_ = tx.Rollback(ctx) // read only; the receipt answers
		return s.answerTx(c, r, obs)
	}
	if !errors.Is(readErr, pgx.ErrNoRows) {
		_ = tx.Rollback(ctx)
		return nil, &StoreError{Op: "read", Key: k, Err: readErr}
	}

	cctx, calling := s.startSpan(ctx, telemetry.SpanCall, k)
	p, err := fn(withRunning(keys.WithToken(cctx, k.Token()), s, c), tx)
	calling.end(err)
	if err == nil {
		err = s.checkSize(k, p)
	}
	// Bookkeeping after fn must not be cut short by the activity's own deadline (an interrupted
	// COMMIT is an unknown outcome that only the next attempt can resolve), and each step of it
	// gets its own timeout from when it is sent (writeContext): a deadline made before fn ran
	// would have passed by now for any fn slower than it, and COMMIT would never be sent.
	if err != nil {
		if rbErr := s.writeOn(ctx, func(wctx context.Context) error { return tx.Rollback(wctx) }); rbErr != nil {
			return nil, &StoreError{Op: "roll back", Key: k, Err: errors.Join(err, rbErr)}
		}
		if isLockTimeout(err) {
			// fn waited longer than the lock timeout for a row that another transaction holds:
			// most likely a duplicate of this intent, running or stalled with its transaction
			// open. Nothing was written; the retry finds its receipt, or runs fn again.
			obs.count(telemetry.ReceiptInProgress)
			return nil, &InProgressError{Key: k, RetryAfter: s.inProgressDelay(s.cfg.LockTimeout)}
		}
		if !s.IsFinal(ctx, err) {
			return nil, err // nothing was written; the retry runs fn again
		}
		wctx, cancel := s.writeContext(ctx)
		defer cancel()
		return s.recordFailureTx(wctx, conn.Conn(), c, err, obs)
	}

	out, err := s.outcome(k, p, nil)
	if err != nil {
		_ = s.writeOn(ctx, func(wctx context.Context) error { return tx.Rollback(wctx) })
		return nil, err
	}
	wctx, cancel := s.writeContext(ctx)
	defer cancel()
	// The transaction's lock timeout (txSettings) holds for the INSERT; wctx's deadline bounds it
	// as a statement timeout would.
	batch := &pgx.Batch{}
	batch.Queue(s.sql.insertFinal, s.finalArgs(c, out)...)
	batch.Queue("COMMIT")
	results = conn.Conn().SendBatch(wctx, batch)
	_, insertErr := results.Exec()
	_, commitErr := results.Exec()
	closeErr := results.Close()
	// The transaction was ended by the batch's COMMIT, behind pgx.Tx's back: the Tx value is
	// dropped here, and the connection goes back to the pool idle. If the INSERT failed, the
	// server skipped the COMMIT and the transaction is still open and aborted: roll it back.
	if conn.Conn().PgConn().TxStatus() != 'I' {
		if err := s.writeOn(ctx, func(wctx context.Context) error { _, err := conn.Conn().Exec(wctx, "ROLLBACK"); return err }); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // the connection is unusable either way
		}
	}
	if isUniqueViolation(insertErr) { // a duplicate won
		rctx, cancel := s.writeContext(ctx)
		defer cancel()
		r, err := s.readOn(rctx, conn.Conn(), k)
		if err != nil {
			return nil, &StoreError{Op: "read", Key: k, Err: err}
		}
		return s.answerTx(c, r, obs)
	}
	if isLockTimeout(insertErr) {
		// A duplicate's receipt is being committed (or its transaction stalled): its outcome
		// is the answer, once it is there.
		obs.count(telemetry.ReceiptInProgress)
		return nil, &InProgressError{Key: k, RetryAfter: s.inProgressDelay(s.cfg.LockTimeout)}
	}
	if err := errors.Join(insertErr, commitErr, closeErr); err != nil {
		// Possibly committed: the next attempt's read tells.
		return nil, &StoreError{Op: "commit", Key: k, Err: err}
	}
	obs.count(telemetry.ReceiptReserved)
	return p, nil
}

// recordFailureTx records a final error of fn, unless a concurrent duplicate's receipt got there
// first, in which case that one is the answer.
func (s *Store) recordFailureTx(ctx context.Context, conn *pgx.Conn, c Call, fnErr error, obs observer) (*commonpb.Payload, error) {
	k := c.Key
	out, err := s.outcome(k, nil, fnErr)
	if err != nil {
		return nil, err
	}
	tag, err := s.execOn(ctx, conn, s.sql.settings, s.sql.insertFinal+" ON CONFLICT DO NOTHING", s.finalArgs(c, out)...)
	if err != nil && !isUniqueViolation(err) {
		return nil, &StoreError{Op: "complete", Key: k, Err: err}
	}
	if err != nil || tag.RowsAffected() == 0 {
		r, err := s.readOn(ctx, conn, k)
		if err != nil {
			return nil, &StoreError{Op: "read", Key: k, Err: err}
		}
		return s.answerTx(c, r, obs)
	}
	return nil, fnErr
}

// answerTx answers a DoInNewTx or DoInTx call (RegisterTx) from an existing receipt.
func (s *Store) answerTx(c Call, r receipt, obs observer) (*commonpb.Payload, error) {
	if err := s.checkFingerprint(&c, r, obs); err != nil {
		return nil, err
	}
	if err := checkCompensated(c, r, obs); err != nil {
		return nil, err
	}
	if r.state == schema.StatePending {
		// Only Do leaves receipts pending; a key must not be shared between Do and the transactional paths (RegisterTx, DoInNewTx, DoInTx).
		obs.count(telemetry.ReceiptInProgress)
		return nil, &InProgressError{Key: c.Key, RetryAfter: s.inProgressDelay(r.lease)}
	}
	obs.count(telemetry.ReceiptReplayed)
	return s.replay(c.Key, r)
}

func (s *Store) finalArgs(c Call, o outcome) []any {
	k := c.Key
	return append([]any{k.Namespace, k.Tenant, k.Operation, k.ID, string(k.Token()), c.Fingerprint.Sum[:], c.Fingerprint.Version,
		o.state, o.result, o.failure, o.errType, o.errMsg, s.cfg.Retention.Microseconds()}, c.origin.args()...)
}

// DoInTx runs the local-mutation path in the caller's transaction (activity.DoInTx): the receipt commits when the
// caller commits. It works inside a savepoint so that a failing fn, or a duplicate's receipt
// found at the INSERT, undoes only what it wrote. It sends no settings: set_config(…, true)
// would outlive the savepoint and change the caller's transaction.
func (s *Store) DoInTx(ctx context.Context, tx pgx.Tx, c Call, fn TxFunc) (*commonpb.Payload, error) {
	if err := s.check(&c); err != nil {
		return nil, err
	}
	c.origin = originOf(ctx)
	if tx == nil {
		return nil, errors.New("activity.DoInTx: tx is nil; begin a transaction, or call DoInNewTx")
	}
	if err := s.authorize(ctx, c); err != nil { // before the read that could replay
		return nil, err
	}
	k := c.Key
	obs := newObserver(ctx, s, k)
	r, err := scanReceipt(tx.QueryRow(ctx, s.sql.read, k.Namespace, k.Tenant, k.Operation, k.ID))
	switch {
	case err == nil:
		return s.answerTx(c, r, obs)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, &StoreError{Op: "read", Key: k, Err: err}
	}

	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, &StoreError{Op: "savepoint", Key: k, Err: err}
	}
	cctx, calling := s.startSpan(ctx, telemetry.SpanCall, k)
	p, err := fn(withRunning(keys.WithToken(cctx, k.Token()), s, c), sp)
	calling.end(err)
	if err == nil {
		err = s.checkSize(k, p)
	}
	if err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return nil, &StoreError{Op: "roll back to savepoint", Key: k, Err: errors.Join(err, rbErr)}
		}
		if !s.IsFinal(ctx, err) {
			return nil, err
		}
		out, oerr := s.outcome(k, nil, err)
		if oerr != nil {
			return nil, oerr
		}
		return nil, s.recordInTx(ctx, tx, c, out, obs, err)
	}
	out, err := s.outcome(k, p, nil)
	if err != nil {
		_ = sp.Rollback(ctx)
		return nil, err
	}
	if _, err := sp.Exec(ctx, s.sql.insertFinal, s.finalArgs(c, out)...); err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return nil, &StoreError{Op: "roll back to savepoint", Key: k, Err: errors.Join(err, rbErr)}
		}
		if isUniqueViolation(err) { // a duplicate committed first
			return s.answerDuplicateInTx(ctx, tx, c, obs)
		}
		return nil, &StoreError{Op: "complete", Key: k, Err: err}
	}
	if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
		return nil, &StoreError{Op: "release savepoint", Key: k, Err: err}
	}
	obs.count(telemetry.ReceiptReserved)
	return p, nil
}

// recordInTx records fn's final error in tx, unless a duplicate's receipt got there first; it
// returns fnErr, or the duplicate's answer. The INSERT goes in a savepoint of its own: on a
// partitioned table (Store.Partition) a duplicate's finished receipt in another partition fails it
// instead of being skipped, and that failure must not abort the caller's transaction.
func (s *Store) recordInTx(ctx context.Context, tx pgx.Tx, c Call, out outcome, obs observer, fnErr error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return &StoreError{Op: "savepoint", Key: c.Key, Err: err}
	}
	tag, err := sp.Exec(ctx, s.sql.insertFinal+" ON CONFLICT DO NOTHING", s.finalArgs(c, out)...)
	if err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return &StoreError{Op: "roll back to savepoint", Key: c.Key, Err: errors.Join(err, rbErr)}
		}
		if !isUniqueViolation(err) {
			return &StoreError{Op: "complete", Key: c.Key, Err: err}
		}
	} else if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
		return &StoreError{Op: "release savepoint", Key: c.Key, Err: err}
	}
	if err != nil || tag.RowsAffected() == 0 {
		_, err := s.answerDuplicateInTx(ctx, tx, c, obs)
		return err
	}
	return fnErr
}

// answerDuplicateInTx answers from the receipt that a concurrent transaction committed while
// this one ran fn. Under READ COMMITTED tx sees it; under a snapshot that predates it, it cannot,
// and only a new transaction can: InProgressError.
func (s *Store) answerDuplicateInTx(ctx context.Context, tx pgx.Tx, c Call, obs observer) (*commonpb.Payload, error) {
	r, err := scanReceipt(tx.QueryRow(ctx, s.sql.read, c.Key.Namespace, c.Key.Tenant, c.Key.Operation, c.Key.ID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		obs.count(telemetry.ReceiptInProgress)
		return nil, &InProgressError{Key: c.Key, RetryAfter: s.inProgressDelay(0)}
	case err != nil:
		return nil, &StoreError{Op: "read", Key: c.Key, Err: err}
	}
	return s.answerTx(c, r, obs)
}
