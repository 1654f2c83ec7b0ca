package activity_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

type chargeResult struct {
	ChargeID string `json:"charge_id"`
	Token    string `json:"token"`
}

// attemptAnswer is what an attempt run on its own goroutine answered, for the test's goroutine
// to check: require must not be called off the test's goroutine.
type attemptAnswer[T any] struct {
	out T
	err error
}

func TestDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SixtyFourGoroutinesOneKey", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-1/charge", map[string]int{"amount": 100})
		var calls atomic.Int32
		results := make([]chargeResult, 64)
		errs := make([]error, 64)
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				results[i], errs[i] = receipttest.DoUntilDone(ctx, s, c, func(ctx context.Context) (chargeResult, error) {
					n := calls.Add(1)
					tok, _ := keys.TokenFrom(ctx)
					time.Sleep(20 * time.Millisecond) // hold the lease while the others arrive
					return chargeResult{ChargeID: "ch_" + string(rune('0'+n)), Token: tok.String()}, nil
				})
			})
		}
		wg.Wait()
		require.Equal(t, int32(1), calls.Load(), "the wrapped function ran more than once")
		for i := range 64 {
			require.NoError(t, errs[i], "caller %d", i)
			require.Equal(t, results[0], results[i], "caller %d got another result", i)
		}
		require.Equal(t, c.Key.Token().String(), results[0].Token)
	})

	t.Run("ReplayDoesNotCall", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-2/charge", map[string]int{"amount": 100})
		var calls int
		fn := func(context.Context) (chargeResult, error) {
			calls++
			return chargeResult{ChargeID: "ch_1"}, nil
		}
		first, err := activity.Do(ctx, s, c, fn)
		require.NoError(t, err)
		again, err := activity.Do(ctx, s, c, fn)
		require.NoError(t, err)
		require.Equal(t, first, again)
		require.Equal(t, 1, calls)
	})

	t.Run("NonRetryableFailureIsRecordedAndReplayed", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-3/charge", map[string]int{"amount": 100})
		var calls int
		fn := func(context.Context) (chargeResult, error) {
			calls++
			return chargeResult{}, temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil)
		}
		for range 3 {
			_, err := activity.Do(ctx, s, c, fn)
			appErr := temporaltest.RequireAppError(t, err, "CardDeclined", false)
			require.Equal(t, "card declined", appErr.Message())
		}
		require.Equal(t, 1, calls, "a recorded decline was retried into another call")
		state, _ := receiptState(t, schema, c.Key)
		require.Equal(t, operator.StateFailed, state)
	})

	t.Run("RetryableErrorReleasesLeaseAndKeepsToken", func(t *testing.T) {
		t.Parallel()
		s, schema := setup(t, nil)
		c := call(t, "order-4/charge", map[string]int{"amount": 100})
		c.DownstreamDeduplicates = true
		var tokens []keys.Token
		fn := func(ctx context.Context) (chargeResult, error) {
			tok, _ := keys.TokenFrom(ctx)
			tokens = append(tokens, tok)
			if len(tokens) < 3 {
				return chargeResult{}, errors.New("provider answered 503")
			}
			return chargeResult{ChargeID: "ch_1"}, nil
		}
		for range 2 {
			_, err := activity.Do(ctx, s, c, fn)
			require.ErrorContains(t, err, "503")
			state, _ := receiptState(t, schema, c.Key)
			require.Equal(t, operator.StatePending, state)
		}
		// No wait for a lease: the released receipt is taken over at once.
		out, err := activity.Do(ctx, s, c, fn)
		require.NoError(t, err)
		require.Equal(t, "ch_1", out.ChargeID)
		require.Equal(t, []keys.Token{c.Key.Token(), c.Key.Token(), c.Key.Token()}, tokens)
		_, fence := receiptState(t, schema, c.Key)
		require.Equal(t, int64(3), fence)
	})

	t.Run("InProgressCarriesNextRetryDelay", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, nil)
		c := call(t, "order-5/charge", map[string]int{"amount": 100})
		c.Lease = time.Minute
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error)
		go func() {
			_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
				close(started)
				<-release
				return 1, nil
			})
			done <- err
		}()
		<-started
		_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
			t.Error("a duplicate ran while the first attempt held the lease")
			return 0, nil
		})
		var inProgress *activity.InProgressError
		require.ErrorAs(t, err, &inProgress)
		appErr := temporaltest.RequireAppError(t, err, activity.ErrTypeInProgress, true)
		require.Greater(t, appErr.NextRetryDelay(), time.Duration(0))
		require.LessOrEqual(t, appErr.NextRetryDelay(), new(activity.Config).WithDefaults().InProgressDelayMax)
		close(release)
		require.NoError(t, <-done)
	})
}

func TestDuplicateWaitsForTheRunningAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, nil)
	c := call(t, "order-6/charge", map[string]int{"amount": 100})
	c.Lease = time.Minute
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = activity.Do(ctx, s, c, func(context.Context) (int, error) {
			close(started)
			<-release
			return 7, nil
		})
	}()
	<-started
	time.AfterFunc(50*time.Millisecond, func() { close(release) })
	got, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
		t.Error("a duplicate ran while the first attempt held the lease")
		return 0, nil
	})
	require.NoError(t, err, "the duplicate did not wait InProgressWait for an attempt that finished within it")
	require.Equal(t, 7, got)
}

// The asynchronous reservation of a deduplicating downstream switches synchronous_commit off
// for its own transaction only: the session the pool hands out next commits durably again.
func TestAsynchronousReservationStaysInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1 // every statement below runs on the same session
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := activity.NewStore(pool, &activity.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	c := call(t, "order-7/charge", map[string]int{"amount": 100})
	c.DownstreamDeduplicates = true
	var during string
	_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) {
		return 1, pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&during)
	})
	require.NoError(t, err)
	require.Equal(t, "on", during, "the reservation's setting outlived its transaction")
}

// A final error whose message is not valid text (NUL, invalid UTF-8, as bytes from the wire can
// be) is still recorded and replayed, each offending byte as U+FFFD.
func TestFailureWithUnstorableMessageIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, nil)
	c := call(t, "order-8/charge", map[string]int{"amount": 100})
	fail := func(context.Context) (int, error) {
		return 0, temporal.NewNonRetryableApplicationError("card\x00declined \xff", "Declined", nil)
	}
	_, err := activity.Do(ctx, s, c, fail)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, "Declined", appErr.Type())

	_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) {
		t.Error("the recorded failure was not replayed")
		return 0, nil
	})
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, "Declined", appErr.Type())
	require.Equal(t, "card\uFFFDdeclined \uFFFD", appErr.Message())

	// The same for an error type that came off the wire.
	c = call(t, "order-9/charge", map[string]int{"amount": 100})
	_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) {
		return 0, temporal.NewNonRetryableApplicationError("declined", "card_\xffdeclined", nil)
	})
	require.Error(t, err)
	_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) {
		t.Error("the recorded failure was not replayed")
		return 0, nil
	})
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, "card_\uFFFDdeclined", appErr.Type())
}

// Completions of concurrent attempts share statements; each is recorded under its own key.
func TestConcurrentCompletionsAreEachRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	const n = 48
	calls := make([]activity.Call, n)
	for i := range n {
		calls[i] = call(t, fmt.Sprint("batch-", i), map[string]int{"amount": i})
	}
	got, errs := make([]int, n), make([]error, n)
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			got[i], errs[i] = activity.Do(ctx, s, c, func(context.Context) (int, error) { return i, nil })
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "attempt %d", i)
		require.Equal(t, i, got[i], "attempt %d", i)
	}
	var completed int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM "+schema+".receipts WHERE state = 'completed' AND result IS NOT NULL").Scan(&completed))
	require.Equal(t, n, completed)
	for i := range n {
		got, err := activity.Do(ctx, s, call(t, fmt.Sprint("batch-", i), map[string]int{"amount": i}), func(context.Context) (int, error) {
			return -1, nil
		})
		require.NoError(t, err)
		require.Equal(t, i, got, "a receipt holds another attempt's result")
	}
}

// crashAfterEffect starts an attempt that performs its effect and then vanishes without
// recording anything, as a worker killed after the external call would. It returns once the
// effect happened.
