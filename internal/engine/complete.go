package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tempotent/tempotent/keys"
)

// Bounds of the completions that share one statement: by count, and by the bytes of their
// results and failures, so that one batch of large results is not a statement of hundreds of
// megabytes.
const (
	maxBatch      = 256
	maxBatchBytes = 4 << 20
)

// completions records the outcomes of a store's attempts, in group commits (group). A batch
// skips rows that are locked elsewhere instead of waiting for them; the attempts whose rows it
// skipped write their completions on their own, each waiting at most the store's lock timeout.
// One locked receipt therefore delays only its own attempt.
type completions struct {
	store *Store
	group[*completion]
}

// completion is one attempt's outcome. It is written only while the attempt's reservation still
// holds the pending receipt, and only to a receipt of the same fingerprint.
type completion struct {
	key         keys.Key
	reservation reservation
	fingerprint keys.Fingerprint
	outcome     outcome

	// retryUntil is when the attempt's lease ends: until then, a completion that meets its
	// receipt locked writes again (completeOne). The zero time writes once.
	retryUntil time.Time

	done    chan struct{}
	written bool  // the reservation held and the outcome is recorded
	skipped bool  // the batch skipped it (locked, or fenced out): write it alone to know which
	err     error // the batch could not be written
}

// complete records c and reports whether c's reservation still held the receipt. An error means
// the outcome may or may not be recorded: the lease stands, and the next attempt finds out.
func (q *completions) complete(ctx context.Context, c *completion) (bool, error) {
	c.done = make(chan struct{})
	q.add(c, q.take, q.send)
	select {
	case <-c.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if c.skipped {
		return q.store.completeOne(ctx, c)
	}
	return c.written, c.err
}

// take removes the next batch from the queue: in arrival order, at most maxBatch completions and
// maxBatchBytes (but at least one), and at most one completion per key.
func (q *completions) take() []*completion {
	var batch, rest []*completion
	seen := map[keys.Key]bool{}
	size := 0
	for _, c := range q.queue {
		fits := len(batch) == 0 || (len(batch) < maxBatch && size+c.outcome.size() <= maxBatchBytes)
		if fits && !seen[c.key] {
			seen[c.key] = true
			size += c.outcome.size()
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	q.queue = rest
	return batch
}

func (q *completions) send(batch []*completion) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	// Detached from every caller: one caller giving up must not cancel the others' write.
	ctx, cancel := q.store.writeContext(context.Background())
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		tag, err := q.store.execOn(ctx, q.store.receipts, noSettings, q.store.sql.completeSkipLocked, c.args(q.store)...)
		c.written, c.err = tag.RowsAffected() > 0, err
		c.skipped = err == nil && !c.written
		return
	}
	written := map[reservation]bool{}
	err := q.store.query(ctx, q.store.sql.completeBatchSettings, q.store.sql.completeBatch, q.store.completeBatchArgs(batch),
		func(rows pgx.Rows) error {
			var r pgtype.UUID
			if err := rows.Scan(&r); err != nil {
				return err
			}
			written[r.Bytes] = true
			return nil
		})
	for _, c := range batch {
		c.written, c.skipped, c.err = written[c.reservation], err == nil && !written[c.reservation], err
	}
}

// completeBatchArgs are the arguments of completeBatch for batch.
func (s *Store) completeBatchArgs(batch []*completion) []any {
	n := len(batch)
	var (
		namespaces, tenants, operations, ids = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		reservations                         = make([]pgtype.UUID, n)
		fingerprints                         = make([][]byte, n)
		versions                             = make([]int16, n)
		states                               = make([]string, n)
		results, failures                    = make([][]byte, n), make([][]byte, n)
		errTypes, errMsgs                    = make([]*string, n), make([]*string, n)
	)
	for i, c := range batch {
		namespaces[i], tenants[i], operations[i], ids[i] = c.key.Namespace, c.key.Tenant, c.key.Operation, c.key.ID
		reservations[i], fingerprints[i], versions[i] = c.reservation.uuid(), c.fingerprint.Sum[:], c.fingerprint.Version
		o := c.outcome
		states[i], results[i], failures[i], errTypes[i], errMsgs[i] = o.state, o.result, o.failure, o.errType, o.errMsg
	}
	return []any{namespaces, tenants, operations, ids, reservations, fingerprints, versions, states, results, failures,
		errTypes, errMsgs, s.cfg.Retention.Microseconds()}
}

// completeOne writes one completion that a batch skipped, on its own and outside the queue,
// each write waiting at most the lock timeout for its row. No row means the attempt was fenced
// out.
//
// A lock timeout does not drop the outcome: the attempt knows it, and dropping it would leave
// the receipt pending with an effect possible, which the next attempt meets as an unknown outcome
// at a downstream that does not deduplicate. So the write is sent again, after a pause drawn with
// full jitter from a bound that grows from a quarter of the lock timeout to the lock timeout,
// until it gets the row or the attempt's lease ends (c.retryUntil). Each write matches the
// attempt's reservation, so once another attempt has taken the receipt over (the lease ended)
// it matches nothing. Past the lease, the lock timeout is returned as before.
func (s *Store) completeOne(ctx context.Context, c *completion) (bool, error) {
	for delay := max(s.cfg.LockTimeout/4, time.Millisecond); ; delay = min(2*delay, s.cfg.LockTimeout) {
		wctx, cancel := s.writeContext(ctx) // each write its own timeout, from when it is sent
		tag, err := s.exec(wctx, s.sql.complete, c.args(s)...)
		cancel()
		if !isLockTimeout(err) {
			return tag.RowsAffected() > 0, err
		}
		wait := fullJitter(delay)
		if time.Now().Add(wait).After(c.retryUntil) {
			return false, err
		}
		time.Sleep(wait)
	}
}

// args are the parameters of complete and completeSkipLocked.
func (c *completion) args(s *Store) []any {
	k, o := c.key, c.outcome
	return []any{k.Namespace, k.Tenant, k.Operation, k.ID, c.reservation.uuid(), c.fingerprint.Sum[:], c.fingerprint.Version,
		o.state, o.result, o.failure, o.errType, o.errMsg, s.cfg.Retention.Microseconds()}
}

// fullJitter returns a delay drawn uniformly from (0, d]: retries that would wake together (the
// duplicates of one busy key, the writes of one locked receipt) spread over the whole interval.
func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return 1 + time.Duration(rand.Int64N(int64(d)))
}
