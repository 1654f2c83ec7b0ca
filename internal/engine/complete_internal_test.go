package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
)

// TestTakeKeepsTheBatchBounds checks the bounds of one batch of completions: exactly maxBatch
// by count, results up to exactly maxBatchBytes, one completion per key, the rest left queued
// in order.
func TestTakeKeepsTheBatchBounds(t *testing.T) {
	t.Parallel()
	q := &completions{}
	for i := range maxBatch + 10 {
		q.queue = append(q.queue, &completion{key: keys.Key{ID: fmt.Sprint(i)}})
	}
	require.Len(t, q.take(), maxBatch)
	require.Len(t, q.queue, 10)
	require.Equal(t, fmt.Sprint(maxBatch), q.queue[0].key.ID)

	half := &outcome{}
	half.result = make([]byte, maxBatchBytes/2-half.size())
	q.queue = []*completion{
		{key: keys.Key{ID: "a"}, outcome: *half},
		{key: keys.Key{ID: "a"}, outcome: *half}, // the same key: never twice in one statement
		{key: keys.Key{ID: "b"}, outcome: *half}, // fills the batch to exactly maxBatchBytes
		{key: keys.Key{ID: "c"}},                 // one byte too many
	}
	batch := q.take()
	require.Len(t, batch, 2)
	require.Equal(t, "b", batch[1].key.ID)
	require.Len(t, q.queue, 2)
	require.Equal(t, "a", q.queue[0].key.ID)
}

// TestBatchSkipsWhatItCannotWrite sends batches of one and of several, with a receipt locked by
// another transaction and a completion whose reservation no longer holds its receipt: the batch
// writes the others at once and marks those two skipped (not written, no error), for their
// callers to write alone; written alone, the locked one is recorded once the lock is gone and
// the fenced-out one is not.
func TestBatchSkipsWhatItCannotWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t)
	s, err := NewStore(pool, &Config{Schema: name, LockTimeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	fp, err := keys.FingerprintOf(1)
	require.NoError(t, err)
	reserved := func(id string) *completion {
		k := keys.Key{Namespace: "batch", Operation: "Charge", ID: id}
		res := newReservation()
		_, err := scanReceipt(s.queryRow(ctx, s.receipts, s.sql.settings, s.sql.reserve,
			s.reserveArgs(Call{Key: k, Fingerprint: fp}, res, time.Hour)...))
		require.NoError(t, err)
		return &completion{key: k, reservation: res, fingerprint: fp,
			outcome: outcome{state: schema.StateCompleted, result: []byte("1")}, done: make(chan struct{})}
	}
	lock := func(c *completion) (unlock func()) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) }) // also when the test fails while it holds the lock
		_, err = tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{name, "receipts"}.Sanitize()+" WHERE id = $1 FOR UPDATE", c.key.ID)
		require.NoError(t, err)
		return func() { require.NoError(t, tx.Rollback(ctx)) }
	}
	requireSkipped := func(c *completion) {
		t.Helper()
		require.True(t, c.skipped, "%s not skipped", c.key.ID)
		require.False(t, c.written, c.key.ID)
		require.NoError(t, c.err, c.key.ID)
	}

	alone := reserved("alone")
	unlock := lock(alone)
	s.completions.send([]*completion{alone})
	requireSkipped(alone)
	unlock()
	written, err := s.completeOne(ctx, alone)
	require.NoError(t, err)
	require.True(t, written)

	locked, free, fenced := reserved("locked"), reserved("free"), reserved("fenced")
	fenced.reservation = newReservation() // taken over since
	unlock = lock(locked)
	batch := []*completion{locked, free, fenced}
	for _, c := range batch {
		c.done = make(chan struct{})
	}
	s.completions.send(batch)
	requireSkipped(locked)
	requireSkipped(fenced)
	require.True(t, free.written)
	require.False(t, free.skipped)
	unlock()
	written, err = s.completeOne(ctx, locked)
	require.NoError(t, err)
	require.True(t, written)
	written, err = s.completeOne(ctx, fenced)
	require.NoError(t, err)
	require.False(t, written, "a completion whose reservation was taken over was recorded")
}

// TestRetryAfterIsBounded checks the bound of the next-retry delay of an InProgressError: the
// time the key stays busy, but at least 100 ms (no retry storm on a lease about to end) and at
// most Config.InProgressDelayMax. A duplicate's delay is drawn below it (inProgressDelay,
// TestInProgressRetriesHaveFullJitter).
func TestRetryAfterIsBounded(t *testing.T) {
	t.Parallel()
	s := &Store{cfg: Config{InProgressDelayMax: 5 * time.Second}}
	require.Equal(t, 100*time.Millisecond, s.retryAfter(time.Millisecond))
	require.Equal(t, 2*time.Second, s.retryAfter(2*time.Second))
	require.Equal(t, 5*time.Second, s.retryAfter(time.Hour))
}

// TestLockedCompletionRetriesUntilTheExtendedLeaseEnds: a completion that meets its receipt
// locked writes again until the attempt's lease ends, and a heartbeat that extended the lease
// (leaseHolder.extend) moves that end. Here the lease the attempt started with (1 s) ends while
// the receipt is locked, the one its extension gave it (1 min) does not: no other attempt can
// take the receipt over yet, so the completion keeps writing and the result is recorded once
// the lock is gone, instead of being dropped at the end of the first lease.
func TestLockedCompletionRetriesUntilTheExtendedLeaseEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t)
	s, err := NewStore(pool, &Config{Schema: name, LockTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	fp, err := keys.FingerprintOf(1)
	require.NoError(t, err)
	c := Call{Key: keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "order-1/charge"}, Fingerprint: fp, Lease: time.Second}
	result, err := converter.GetDefaultDataConverter().ToPayload("ch_1")
	require.NoError(t, err)

	started := time.Now()
	unlocked := make(chan struct{})
	_, err = s.Do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
		if err := leaseFrom(ctx).extend(ctx, time.Minute); err != nil {
			return nil, err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{name, "receipts"}.Sanitize()+" WHERE id = $1 FOR UPDATE", c.Key.ID); err != nil {
			return nil, err
		}
		go func() { // unlock well past the first lease's end
			defer close(unlocked)
			time.Sleep(time.Until(started.Add(3 * time.Second)))
			_ = tx.Rollback(context.Background())
		}()
		return result, nil
	})
	<-unlocked
	require.NoError(t, err, "the completion gave up at the end of the lease it started with, though a heartbeat had extended it")
	got, err := s.read(ctx, c.Key)
	require.NoError(t, err)
	require.Equal(t, schema.StateCompleted, got.state)
}
