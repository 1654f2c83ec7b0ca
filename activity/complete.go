package activity

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/keys"
)

// maxBatch bounds the completions that share one statement.
const maxBatch = 256

// completions records the outcomes of a store's attempts. Completions that arrive while another
// batch is being written wait for it and then go out together, in one statement and one commit:
// under load, one WAL flush serves many receipts. There is no timer, and a completion that finds
// nothing in flight is written at once by its own goroutine, so a lone attempt waits for nobody
// and pays no hand-off.
type completions struct {
	store   *Store
	mu      sync.Mutex
	queue   []*completion
	writing bool // a batch is in flight; the queue is empty whenever it is false
}

// completion is one attempt's outcome, fenced: it is written only while the attempt's fence
// still holds the pending receipt.
type completion struct {
	key             keys.Key
	fence           int64
	state           string
	result          []byte
	errType, errMsg *string

	done    chan struct{}
	written bool  // the fence held and the outcome is recorded
	err     error // the batch could not be written
}

// complete records c and reports whether c's fence still held the receipt. An error means the
// outcome may or may not be recorded: the lease stands, and the next attempt finds out.
func (q *completions) complete(ctx context.Context, c *completion) (bool, error) {
	c.done = make(chan struct{})
	q.mu.Lock()
	q.queue = append(q.queue, c)
	lead := !q.writing
	q.writing = true
	q.mu.Unlock()
	if lead {
		q.writeNext() // its batch is c alone: nothing queues while no batch is in flight
	}
	select {
	case <-c.done:
		return c.written, c.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// writeNext writes the next batch, then hands what queued meanwhile to a new writer.
func (q *completions) writeNext() {
	q.mu.Lock()
	batch := q.take()
	q.mu.Unlock()
	q.send(batch)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.writing = false
		return
	}
	go q.writeNext()
}

// take removes the next batch from the queue: in arrival order, at most maxBatch, and at most one
// completion per key, so that each row of the statement's answer names one completion.
func (q *completions) take() []*completion {
	var batch, rest []*completion
	seen := map[keys.Key]bool{}
	for _, c := range q.queue {
		if len(batch) < maxBatch && !seen[c.key] {
			seen[c.key] = true
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	q.queue = rest
	return batch
}

func (q *completions) send(batch []*completion) {
	// Detached from every caller: one caller giving up must not cancel the others' write.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rows pgx.Rows
	var err error
	if len(batch) == 1 {
		c := batch[0]
		rows, err = q.store.db.Query(ctx, q.store.sql.complete, c.key.Namespace, c.key.Tenant, c.key.Operation, c.key.ID,
			c.fence, c.state, c.result, c.errType, c.errMsg, q.store.cfg.Retention.Microseconds())
	} else {
		n := len(batch)
		var (
			namespaces, tenants, operations, ids = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			fences                               = make([]int64, n)
			states                               = make([]string, n)
			results                              = make([][]byte, n)
			errTypes, errMsgs                    = make([]*string, n), make([]*string, n)
		)
		for i, c := range batch {
			namespaces[i], tenants[i], operations[i], ids[i] = c.key.Namespace, c.key.Tenant, c.key.Operation, c.key.ID
			fences[i], states[i], results[i], errTypes[i], errMsgs[i] = c.fence, c.state, c.result, c.errType, c.errMsg
		}
		rows, err = q.store.db.Query(ctx, q.store.sql.completeBatch, namespaces, tenants, operations, ids, fences,
			states, results, errTypes, errMsgs, q.store.cfg.Retention.Microseconds())
	}
	written := map[keys.Key]bool{}
	if err == nil {
		for rows.Next() {
			var k keys.Key
			if err = rows.Scan(&k.Namespace, &k.Tenant, &k.Operation, &k.ID); err != nil {
				break
			}
			written[k] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	for _, c := range batch {
		c.written, c.err = written[c.key], err
		close(c.done)
	}
}
