package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
)

// reservations writes the reservations of a store's first executions in group commits
// (group), as completions writes their outcomes. A batch of one is the single-key statement as
// ever. Every caller returns only after the statement that wrote its reservation has committed,
// as durably as its own call asked (reserveSettings): a batch commits durably when any of its
// reservations must.
//
// A batch that fails as a whole (most likely a lock wait: a key of the batch inserted by
// another transaction that has not committed, such as a DoInNewTx of the same intent) is not
// retried as a batch: each of its reservations is written again on its own, so that one busy key
// delays, or fails, only its own attempt.
//
// One batch is in flight at a time, as for completions: with two or four at once, batches were
// smaller and receipts per second fewer on the benchmark's machine, where Postgres' CPU, not its
// WAL flush, is what runs out first.
type reservations struct {
	store *Store
	group[*reserveReq]
}

// reserveReq is one attempt's reservation on its way to the database, and what came back: the
// receipt now there (inserted by this reservation or found), pgx.ErrNoRows when neither (a
// receipt committed by a concurrent attempt after the statement's snapshot: read it), or the
// error that kept the statement from running.
type reserveReq struct {
	call        Call
	reservation reservation
	lease       time.Duration

	done    chan struct{}
	receipt receipt
	err     error
	alone   bool // the batch failed (or, with fences, returned no row for it): write it on its own to know what became of it
}

// reserve writes r, or finds the receipt already there, and returns it.
func (q *reservations) reserve(ctx context.Context, r *reserveReq) (receipt, error) {
	r.done = make(chan struct{})
	q.add(r, q.take, q.send)
	// Wait for the batch even when ctx ends first: it goes on without this caller (it is bounded
	// by the statement timeout), and a reservation it writes for an attempt that will never call
	// must not stand as an effect that may have happened.
	<-r.done
	if ctx.Err() != nil {
		if !r.alone && r.err == nil && r.receipt.inserted {
			wctx, cancel := q.store.writeContext(ctx)
			defer cancel()
			_, _ = q.store.release(wctx, &attempt{call: r.call, reservation: r.reservation}, false, 0)
		}
		return receipt{}, ctx.Err()
	}
	if r.alone {
		wctx, cancel := q.store.writeContext(ctx)
		defer cancel()
		return q.store.reserveOne(wctx, r)
	}
	return r.receipt, r.err
}

// take removes the next batch from the queue: in arrival order, at most maxBatch reservations
// and at most one per key (a second reservation of a key waits for the next batch, where it
// finds the first one's receipt).
func (q *reservations) take() []*reserveReq {
	var batch, rest []*reserveReq
	seen := map[keys.Key]bool{}
	for _, r := range q.queue {
		if len(batch) < maxBatch && !seen[r.call.Key] {
			seen[r.call.Key] = true
			batch = append(batch, r)
		} else {
			rest = append(rest, r)
		}
	}
	q.queue = rest
	return batch
}

func (q *reservations) send(batch []*reserveReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	// Detached from every caller: one caller giving up must not cancel the others' write.
	ctx, cancel := q.store.writeContext(context.Background())
	defer cancel()
	if len(batch) == 1 {
		r := batch[0]
		r.receipt, r.err = q.store.reserveOne(ctx, r)
		return
	}
	s, n := q.store, len(batch)
	settings := s.sql.reserveBatchSettingsAsync
	for _, r := range batch {
		if s.reserveSettings(r.call) != s.sql.settingsAsync {
			settings = s.sql.reserveBatchSettings // one reservation that must be durable makes the commit durable
		}
	}
	got := make([]bool, n)
	err := s.query(ctx, settings, s.sql.reserveBatch, s.reserveBatchArgs(batch), func(rows pgx.Rows) error {
		var i int64
		r, err := scanReceipt(numberedRow{rows, &i})
		if err == nil && i >= 1 && i <= int64(n) {
			batch[i-1].receipt, got[i-1] = r, true
		}
		return err
	})
	for i, r := range batch {
		switch {
		case err != nil:
			r.alone = true
		case got[i]:
		case s.cfg.TenantFences:
			// No row: a receipt committed after the statement's snapshot, or a fenced tenant's
			// row that the batch left out (fences.skip). Alone, reserve answers either: the
			// receipt, pgx.ErrNoRows, or the tenant's refusal, for that reservation only.
			r.alone = true
		default:
			r.err = pgx.ErrNoRows
		}
	}
}

// reserveBatchArgs are the arguments of reserveBatch for batch.
func (s *Store) reserveBatchArgs(batch []*reserveReq) []any {
	n := len(batch)
	var (
		namespaces, tenants, operations, ids, tokens = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		fingerprints                                 = make([][]byte, n)
		versions                                     = make([]int16, n)
		reservations                                 = make([]pgtype.UUID, n)
		leases                                       = make([]int64, n)
		workflowIDs, runIDs, activityIDs             = make([]*string, n), make([]*string, n), make([]*string, n)
		activityTypes, compensates                   = make([]*string, n), make([]*string, n)
	)
	for i, r := range batch {
		c, k := r.call, r.call.Key
		namespaces[i], tenants[i], operations[i], ids[i], tokens[i] = k.Namespace, k.Tenant, k.Operation, k.ID, string(k.Token())
		fingerprints[i], versions[i] = c.Fingerprint.Sum[:], c.Fingerprint.Version
		reservations[i], leases[i] = r.reservation.uuid(), r.lease.Microseconds()
		o := c.origin
		workflowIDs[i], runIDs[i], activityIDs[i], activityTypes[i], compensates[i] = o.workflowID, o.runID, o.activityID, o.activityType, o.compensates
	}
	return []any{namespaces, tenants, operations, ids, tokens, fingerprints, versions, reservations, leases,
		s.cfg.Retention.Microseconds(), workflowIDs, runIDs, activityIDs, activityTypes, compensates}
}

// numberedRow is a row of reserveBatch: the number of the reservation it answers (its place in
// the batch, from 1), then the columns scanReceipt reads.
type numberedRow struct {
	rows pgx.Rows
	n    *int64
}

func (r numberedRow) Scan(dest ...any) error { return r.rows.Scan(append([]any{r.n}, dest...)...) }

// reserveOne writes one reservation with the single-key statement.
func (s *Store) reserveOne(ctx context.Context, r *reserveReq) (receipt, error) {
	return scanReceipt(s.queryRow(ctx, s.receipts, s.reserveSettings(r.call), s.sql.reserve, s.reserveArgs(r.call, r.reservation, r.lease)...))
}

// reserveArgs are the arguments of the reserve statement for c under reservation res.
func (s *Store) reserveArgs(c Call, res reservation, lease time.Duration) []any {
	k := c.Key
	return append([]any{k.Namespace, k.Tenant, k.Operation, k.ID, string(k.Token()), c.Fingerprint.Sum[:], c.Fingerprint.Version,
		res.uuid(), lease.Microseconds(), s.cfg.Retention.Microseconds()}, c.origin.args()...)
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

// readPlain reads k's receipt with the plain prepared statement alone: a replay's one round
// trip, as lean as a read of one row by its key can be. It returns pgx.ErrNoRows when there is
// no receipt.
//
// No settings go before it (a read waits for no row lock), so it is sent alone, outside a batch
// (loneSender). What bounds it is a deadline of its own (statementContext), as every other
// receipt statement is bounded: without the settings' statement_timeout, a read behind a table
// held by DDL would otherwise wait as long as the caller's context lets it.
func (s *Store) readPlain(ctx context.Context, k keys.Key) (receipt, error) {
	ctx, cancel := s.statementContext(ctx)
	defer cancel()
	return scanReceipt(s.queryRow(ctx, s.receipts, noSettings, s.sql.read, k.Namespace, k.Tenant, k.Operation, k.ID))
}

// readTakeOver reads c's receipt and, where Do would take it over at once, takes it over under
// res in the same statement (the statement readTakeOver): the retry of a call that runs again
// safely pays one round trip for its takeover, not two. It returns the receipt as read, and the
// fence taken when it took the receipt over (nil when it did not), or pgx.ErrNoRows when there
// is no receipt.
func (s *Store) readTakeOver(ctx context.Context, c Call, res reservation, lease time.Duration) (receipt, *int64, error) {
	k := c.Key
	var fence *int64
	r, err := scanReceipt(prefixedRow{s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.readTakeOver, k.Namespace, k.Tenant, k.Operation, k.ID,
		res.uuid(), lease.Microseconds(), s.cfg.Retention.Microseconds(), c.Fingerprint.Sum[:], c.Fingerprint.Version,
		c.Reconcile == nil), &fence})
	if err != nil {
		return r, nil, err
	}
	return r, fence, nil
}

// prefixedRow is a row whose first column goes to first, then the columns scanReceipt reads.
type prefixedRow struct {
	row   pgx.Row
	first any
}

func (r prefixedRow) Scan(dest ...any) error { return r.row.Scan(append([]any{r.first}, dest...)...) }

// replayLikely reports whether c is probably a retry of an intent that an earlier attempt
// finished, so that a plain lookup should go first: from the second attempt on (Call.Attempt,
// else the Temporal activity's own). A first attempt goes straight to the statement that
// reserves, which answers a replay too, so that a first execution keeps its two round trips.
func replayLikely(ctx context.Context, c Call) bool {
	if c.readUnfinished {
		return false
	}
	attempt := c.Attempt
	if attempt == 0 && sdkactivity.IsActivity(ctx) {
		attempt = sdkactivity.GetInfo(ctx).Attempt
	}
	return attempt > 1
}
