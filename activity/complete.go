package activity

import (
	"context"

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
// waiting at most the lock timeout for its row. No row means the attempt was fenced out.
func (s *Store) completeOne(ctx context.Context, c *completion) (bool, error) {
	tag, err := s.exec(ctx, s.sql.complete, c.args(s)...)
	return tag.RowsAffected() > 0, err
}

// args are the parameters of complete and completeSkipLocked.
func (c *completion) args(s *Store) []any {
	k, o := c.key, c.outcome
	return []any{k.Namespace, k.Tenant, k.Operation, k.ID, c.reservation.uuid(), c.fingerprint.Sum[:], c.fingerprint.Version,
		o.state, o.result, o.failure, o.errType, o.errMsg, s.cfg.Retention.Microseconds()}
}
