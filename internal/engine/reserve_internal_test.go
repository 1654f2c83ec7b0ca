package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
)

// reserveStore is a migrated store in a fresh schema, for the tests of reservations.
func reserveStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	cfg.Schema = pgtest.Schema(t)
	s, err := NewStore(pgtest.Pool(t), &cfg)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

func reserveCall(t *testing.T, id string, dedup bool) Call {
	t.Helper()
	fp, err := keys.FingerprintOf(id)
	require.NoError(t, err)
	return Call{Key: keys.Key{Namespace: "reserve", Operation: "Charge", ID: id}, Fingerprint: fp, DownstreamDeduplicates: dedup,
		origin: origin{workflowID: ptr("wf-" + id), activityID: ptr("7")}}
}

// recordingBatcher remembers the first statement of every batch sent through it (the settings)
// and how many keys each reserveBatch carried; gate, when set, holds the first batch until it is
// closed.
type recordingBatcher struct {
	inner batcher
	sql   statements
	gate  chan struct{}

	mu       sync.Mutex
	settings []string
	sizes    []int
}

func (b *recordingBatcher) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	b.mu.Lock()
	first := len(b.settings) == 0
	b.settings = append(b.settings, batch.QueuedQueries[0].SQL)
	last := batch.QueuedQueries[len(batch.QueuedQueries)-1]
	switch last.SQL {
	case b.sql.reserveBatch:
		b.sizes = append(b.sizes, len(last.Arguments[0].([]string)))
	case b.sql.reserve:
		b.sizes = append(b.sizes, 1)
	}
	b.mu.Unlock()
	if first && b.gate != nil {
		<-b.gate
	}
	return b.inner.SendBatch(ctx, batch)
}

// TestReservationBatchAnswersEachAttempt sends one batch of reservations: new keys, a key whose
// receipt is finished and one whose receipt is pending. Each attempt gets its own answer — the
// receipt it inserted, with its lease, token and origin, or the one it found, untouched — and the
// batch commits durably because one of its downstreams does not deduplicate.
func TestReservationBatchAnswersEachAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{})
	rec := &recordingBatcher{inner: s.db, sql: s.sql}
	s.receipts = rec

	done, held := reserveCall(t, "done", true), reserveCall(t, "held", true)
	_, err := doTyped(ctx, s, done, func(context.Context) (string, error) { return "paid", nil })
	require.NoError(t, err)
	heldRes := newReservation()
	_, err = s.reserveOne(ctx, &reserveReq{call: held, reservation: heldRes, lease: time.Hour})
	require.NoError(t, err)

	batch := []*reserveReq{
		{call: reserveCall(t, "a", true), reservation: newReservation(), lease: time.Minute},
		{call: done, reservation: newReservation(), lease: time.Minute},
		{call: reserveCall(t, "b", false), reservation: newReservation(), lease: 2 * time.Minute},
		{call: held, reservation: newReservation(), lease: time.Minute},
	}
	for _, r := range batch {
		r.done = make(chan struct{})
	}
	rec.settings = nil
	s.reservations.send(batch)
	require.Equal(t, []string{s.sql.reserveBatchSettings}, rec.settings, "a batch with a downstream that does not deduplicate committed asynchronously")
	for _, r := range batch {
		require.NoError(t, r.err, r.call.Key.ID)
		require.False(t, r.alone, r.call.Key.ID)
	}
	require.True(t, batch[0].receipt.inserted)
	require.True(t, batch[2].receipt.inserted)
	require.False(t, batch[1].receipt.inserted)
	require.Equal(t, schema.StateCompleted, batch[1].receipt.state)
	require.False(t, batch[3].receipt.inserted)
	require.Equal(t, schema.StatePending, batch[3].receipt.state)
	require.Equal(t, heldRes.uuid(), batch[3].receipt.reservation, "the pending receipt found is not the one there")

	for _, r := range []*reserveReq{batch[0], batch[2]} {
		var (
			token, workflowID string
			res               [16]byte
			leaseS            float64
		)
		k := r.call.Key
		require.NoError(t, s.db.QueryRow(ctx, fmt.Sprintf(`SELECT token, workflow_id, reservation,
			extract(epoch FROM lease_expires_at - created_at) FROM %s WHERE id = $1`, pgx.Identifier{s.cfg.Schema, "receipts"}.Sanitize()),
			k.ID).Scan(&token, &workflowID, &res, &leaseS))
		require.Equal(t, string(k.Token()), token)
		require.Equal(t, "wf-"+k.ID, workflowID)
		require.Equal(t, [16]byte(r.reservation), res)
		require.InDelta(t, r.lease.Seconds(), leaseS, 1)
	}

	// All of them may go asynchronously when every downstream deduplicates.
	rec.settings = nil
	more := []*reserveReq{
		{call: reserveCall(t, "c", true), reservation: newReservation(), lease: time.Minute, done: make(chan struct{})},
		{call: reserveCall(t, "d", true), reservation: newReservation(), lease: time.Minute, done: make(chan struct{})},
	}
	s.reservations.send(more)
	require.Equal(t, []string{s.sql.reserveBatchSettingsAsync}, rec.settings)
	require.True(t, more[0].receipt.inserted && more[1].receipt.inserted)
}

// TestConcurrentReservationsShareAStatement holds the first reservation's statement in flight
// until the other attempts have queued behind it: they go out together, in one statement, and
// each runs once and completes its own receipt.
func TestConcurrentReservationsShareAStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{})
	rec := &recordingBatcher{inner: s.db, sql: s.sql, gate: make(chan struct{})}
	s.receipts = rec

	const n = 16
	var (
		wg    sync.WaitGroup
		calls sync.Map
	)
	for i := range n {
		wg.Go(func() {
			c := reserveCall(t, fmt.Sprint("k", i), true)
			got, err := doTyped(ctx, s, c, func(context.Context) (int, error) {
				_, again := calls.LoadOrStore(i, true)
				require.False(t, again)
				return i, nil
			})
			require.NoError(t, err)
			require.Equal(t, i, got)
		})
	}
	// The first statement is usually the first attempt alone, but whoever queued in the moment
	// before its writer took the queue goes with it: wait until every attempt is either in that
	// statement or queued behind it.
	first := 0
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		if len(rec.sizes) > 0 {
			first = rec.sizes[0]
		}
		rec.mu.Unlock()
		s.reservations.mu.Lock()
		defer s.reservations.mu.Unlock()
		return first > 0 && len(s.reservations.queue) == n-first
	}, 10*time.Second, time.Millisecond)
	close(rec.gate)
	wg.Wait()

	want := []int{first}
	if first < n {
		want = append(want, n-first)
	}
	rec.mu.Lock()
	require.Equal(t, want, rec.sizes, "the reservations that queued behind the first did not share a statement")
	rec.mu.Unlock()
	for i := range n {
		var state string
		require.NoError(t, s.db.QueryRow(ctx, fmt.Sprintf(`SELECT state FROM %s WHERE id = $1`,
			pgx.Identifier{s.cfg.Schema, "receipts"}.Sanitize()), fmt.Sprint("k", i)).Scan(&state))
		require.Equal(t, schema.StateCompleted, state)
	}
}

// TestReservationBatchWithABusyKeyGoesAlone puts in a batch a key that another transaction has
// inserted and not committed (as an open DoInNewTx of the same intent has): the batch gives up after
// the lock timeout, and each reservation is written again on its own, so that only the busy key
// fails — the others are reserved.
func TestReservationBatchWithABusyKeyGoesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{LockTimeout: 100 * time.Millisecond})
	busy := reserveCall(t, "busy", true)

	tx, err := s.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, s.sql.reserve, s.reserveArgs(busy, newReservation(), time.Minute)...)
	require.NoError(t, err)

	free := []*reserveReq{
		{call: reserveCall(t, "free-1", true), reservation: newReservation(), lease: time.Minute},
		{call: reserveCall(t, "free-2", false), reservation: newReservation(), lease: time.Minute},
	}
	batch := append([]*reserveReq{{call: busy, reservation: newReservation(), lease: time.Minute}}, free...)
	results := make(chan error, len(batch))
	for _, r := range batch {
		go func() {
			got, err := s.reservations.reserve(ctx, r)
			if err == nil && !got.inserted {
				err = fmt.Errorf("%s was not inserted", r.call.Key.ID)
			}
			results <- err
		}()
	}
	// Whatever batches they formed, the two free keys are reserved and the busy one fails.
	var failed []error
	for range batch {
		if err := <-results; err != nil {
			failed = append(failed, err)
		}
	}
	require.Len(t, failed, 1)
	require.True(t, isLockTimeout(failed[0]), "the busy key: %v", failed[0])

	// And a batch that does include it: every member is marked to go alone.
	for _, r := range batch {
		r.done = make(chan struct{})
		r.reservation = newReservation()
	}
	batch[1].call.Key.ID, batch[2].call.Key.ID = "free-3", "free-4"
	s.reservations.send(batch)
	for _, r := range batch {
		require.True(t, r.alone, r.call.Key.ID)
	}
}

// TestReservationBatchesInOppositeOrderDoNotDeadlock writes, again and again, two batches of the
// same new keys at once through two stores, as two worker processes would, one in the reverse
// order of the other. Both insert in key order, so the second waits for the first instead of
// deadlocking with it (a deadlock fails a whole batch and sends every member alone).
func TestReservationBatchesInOppositeOrderDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s := reserveStore(t, Config{})
	other, err := NewStore(s.db, &Config{Schema: s.cfg.Schema})
	require.NoError(t, err)
	for round := range 20 {
		var forward, backward []*reserveReq
		for i := range 40 {
			forward = append(forward, &reserveReq{call: reserveCall(t, fmt.Sprint(round, "-", i), true),
				reservation: newReservation(), lease: time.Minute, done: make(chan struct{})})
		}
		for i := range forward {
			r := *forward[len(forward)-1-i]
			r.reservation, r.done = newReservation(), make(chan struct{})
			backward = append(backward, &r)
		}
		var wg sync.WaitGroup
		wg.Go(func() { s.reservations.send(forward) })
		wg.Go(func() { other.reservations.send(backward) })
		wg.Wait()
		inserted := 0
		for _, r := range append(forward, backward...) {
			require.False(t, r.alone, "round %d: a batch failed as a whole", round)
			if !errors.Is(r.err, pgx.ErrNoRows) { // inserted by the other batch after this one's snapshot
				require.NoError(t, r.err)
			}
			if r.receipt.inserted {
				inserted++
			}
		}
		require.Equal(t, len(forward), inserted, "each key is reserved exactly once")
	}
}

// TestTakeKeepsOneReservationPerKey: a second reservation of a key waits for the next batch,
// where it finds the first one's receipt; and a batch holds at most maxBatch.
func TestTakeKeepsOneReservationPerKey(t *testing.T) {
	t.Parallel()
	q := &reservations{}
	for i := range maxBatch + 3 {
		q.queue = append(q.queue, &reserveReq{call: Call{Key: keys.Key{ID: fmt.Sprint(i % (maxBatch + 2))}}})
	}
	batch := q.take()
	require.Len(t, batch, maxBatch)
	require.Len(t, q.queue, 3)
	require.Equal(t, "0", q.queue[2].call.Key.ID, "the second reservation of key 0 went in the same batch")
}

// TestCancelledWhileQueuedLeavesNoPossibleEffect cancels an attempt whose reservation is queued
// behind a batch in flight. The batch that then writes it goes on without the attempt, which
// never calls; its receipt must not say that an effect may have happened, or the next attempt
// at a downstream that does not deduplicate would end with OutcomeUnknown instead of calling.
func TestCancelledWhileQueuedLeavesNoPossibleEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{})
	rec := &recordingBatcher{inner: s.db, sql: s.sql, gate: make(chan struct{})}
	s.receipts = rec

	first := reserveCall(t, "first", false)
	go func() { _, _ = doTyped(ctx, s, first, func(context.Context) (int, error) { return 1, nil }) }()
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.sizes) == 1
	}, 10*time.Second, time.Millisecond)

	queued := reserveCall(t, "queued", false)
	queued.Lease = 50 * time.Millisecond
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := doTyped(cctx, s, queued, func(context.Context) (int, error) { return 0, errors.New("a cancelled attempt called") })
		done <- err
	}()
	require.Eventually(t, func() bool {
		s.reservations.mu.Lock()
		defer s.reservations.mu.Unlock()
		return len(s.reservations.queue) == 1
	}, 10*time.Second, time.Millisecond)
	cancel()
	close(rec.gate)
	require.ErrorIs(t, <-done, context.Canceled)

	time.Sleep(2 * queued.Lease)
	queued.Lease = 0
	got, err := doTyped(ctx, s, queued, func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err, "the next attempt did not call")
	require.Equal(t, 7, got)
}
