package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/migrate"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// setup returns an inbox of consumer in a fresh, migrated schema, with a table the consumer
// writes its own effects to.
func setup(t *testing.T, cfg inbox.Config) (*inbox.Inbox, string) {
	t.Helper()
	ctx := context.Background()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), name))
	_, err := pgtest.Pool(t).Exec(ctx, "CREATE TABLE "+name+".shipments (message_id text NOT NULL)")
	require.NoError(t, err)
	cfg.Schema = name
	ib, err := inbox.New(pgtest.Pool(t), cfg)
	require.NoError(t, err)
	return ib, name
}

func shipments(t *testing.T, name string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+name+".shipments").Scan(&n))
	return n
}

// ship is the consumer's own write.
func ship(name, id string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+name+".shipments VALUES ($1)", id)
		return err
	}
}

// holdClaim claims m for ib in a transaction it leaves open, so that a concurrent delivery of m
// waits on it, and returns that transaction; it is rolled back at the end of the test unless the
// test commits it.
func holdClaim(t *testing.T, ib *inbox.Inbox, m inbox.Message) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	holding, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holding.Rollback(ctx) })
	first, err := ib.Claim(ctx, holding, m)
	require.NoError(t, err)
	require.True(t, first)
	return holding
}

func TestProcessOncePerConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper"})
	m := inbox.Message{ID: "evt-1", Payload: []byte(`{"order":1}`)}

	ran, err := ib.Process(ctx, m, ship(name, m.ID))
	require.NoError(t, err)
	require.True(t, ran)
	ran, err = ib.Process(ctx, m, func(context.Context, pgx.Tx) error {
		t.Error("a duplicate after success ran")
		return nil
	})
	require.NoError(t, err)
	require.False(t, ran, "a duplicate after success is acknowledged without running")
	require.Equal(t, 1, shipments(t, name))

	// Another consumer processes the same message on its own.
	other, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "notifier", Schema: name})
	require.NoError(t, err)
	ran, err = other.Process(ctx, m, ship(name, m.ID))
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 2, shipments(t, name))
}

// A consumer that fails (or crashes before commit) leaves no record: the redelivery runs.
func TestFailureRecordsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper"})
	m := inbox.Message{ID: "evt-1"}
	_, err := ib.Process(ctx, m, func(ctx context.Context, tx pgx.Tx) error {
		if err := ship(name, m.ID)(ctx, tx); err != nil {
			return err
		}
		return errors.New("the carrier's API is down")
	})
	require.Error(t, err)
	require.Zero(t, shipments(t, name))
	ran, err := ib.Process(ctx, m, ship(name, m.ID))
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, shipments(t, name))
}

func TestMismatchedPayloadIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper"})
	_, err := ib.Process(ctx, inbox.Message{ID: "evt-1", Payload: []byte("a")}, ship(name, "evt-1"))
	require.NoError(t, err)
	_, err = ib.Process(ctx, inbox.Message{ID: "evt-1", Payload: []byte("b")}, ship(name, "evt-1"))
	require.ErrorIs(t, err, inbox.ErrMismatch)
	temporaltest.RequireAppError(t, err, inbox.ErrTypeMismatch, false)
	require.Equal(t, 1, shipments(t, name))
	// Without a payload, only the ID counts.
	ran, err := ib.Process(ctx, inbox.Message{ID: "evt-1"}, ship(name, "evt-1"))
	require.NoError(t, err)
	require.False(t, ran)
}

// Concurrent deliveries of one message: exactly one runs; the others wait for it and are then
// acknowledged as duplicates, or, past the lock timeout, get a retryable in-progress error.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper", LockTimeout: 5 * time.Second})
	var ran atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			r, err := ib.Process(ctx, inbox.Message{ID: "evt-1"}, func(ctx context.Context, tx pgx.Tx) error {
				time.Sleep(50 * time.Millisecond) // hold the claim while the others arrive
				return ship(name, "evt-1")(ctx, tx)
			})
			if r {
				ran.Add(1)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), ran.Load())
	require.Equal(t, 1, shipments(t, name))

	// Past the lock timeout: in progress, retryable, and the caller's transaction still works.
	short, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "shipper", Schema: name, LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	holdClaim(t, short, inbox.Message{ID: "evt-2"})

	err = pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		_, err := short.Claim(ctx, tx, inbox.Message{ID: "evt-2"})
		require.ErrorIs(t, err, inbox.ErrInProgress)
		var inProgress *inbox.InProgressError
		require.ErrorAs(t, err, &inProgress)
		temporaltest.RequireAppError(t, err, inbox.ErrTypeInProgress, true)
		var timeout string
		require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&timeout))
		require.Equal(t, "0", timeout, "the inbox's lock_timeout leaked into the caller's transaction")
		return nil
	})
	require.NoError(t, err)

	// After a successful claim too, the caller's statements run under its own lock_timeout.
	err = pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		_, err := short.Claim(ctx, tx, inbox.Message{ID: "evt-3"})
		require.NoError(t, err)
		var timeout string
		require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&timeout))
		require.Equal(t, "0", timeout)
		return nil
	})
	require.NoError(t, err)
}

func TestPurgeKeepsRecentRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper", Retention: time.Hour})
	for _, id := range []string{"old", "new"} {
		_, err := ib.Process(ctx, inbox.Message{ID: id}, ship(name, id))
		require.NoError(t, err)
	}
	_, err := pgtest.Pool(t).Exec(ctx, "UPDATE "+name+".inbox SET processed_at = now() - interval '2 hours' WHERE message_id = 'old'")
	require.NoError(t, err)
	n, err := ib.Purge(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	ran, err := ib.Process(ctx, inbox.Message{ID: "new"}, ship(name, "new"))
	require.NoError(t, err)
	require.False(t, ran)
	// Past the horizon, a duplicate is a new message: the reason Retention must exceed the
	// producer's redelivery horizon.
	ran, err = ib.Process(ctx, inbox.Message{ID: "old"}, ship(name, "old"))
	require.NoError(t, err)
	require.True(t, ran)
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := inbox.New(pgtest.Pool(t), inbox.Config{})
	require.ErrorContains(t, err, "Consumer")
	_, err = inbox.New(nil, inbox.Config{Consumer: "c"})
	require.Error(t, err)
	ib, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "c", Schema: "no_such_schema_here"})
	require.NoError(t, err)
	require.ErrorContains(t, ib.Check(context.Background()), "Migrate")
}

// A lock timeout under a millisecond still times out: Postgres reads "0ms" as no timeout at all,
// which would make a duplicate wait for as long as the first delivery holds its transaction.
func TestSubMillisecondLockTimeoutStillTimesOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipper", LockTimeout: time.Microsecond})
	holdClaim(t, ib, inbox.Message{ID: "evt-1"})
	_, err := ib.Process(ctx, inbox.Message{ID: "evt-1"}, ship(name, "evt-1"))
	require.ErrorIs(t, err, inbox.ErrInProgress)
}
