package activity_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// loseReceipt deletes k's receipt, as a Postgres crash loses an asynchronous reservation that
// was not flushed yet, or as a purge removes a row.
func loseReceipt(t *testing.T, schema string, k keys.Key) {
	t.Helper()
	tag, err := pgtest.Pool(t).Exec(context.Background(),
		"DELETE FROM "+schema+".receipts WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)", k.Namespace, k.Tenant, k.Operation, k.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
}

// pausedAttempt starts an attempt of c that reserves and then waits in its function until
// resumed, then returns result and fnErr; it returns once the attempt is inside the function.
func pausedAttempt[T any](ctx context.Context, s *activity.Store, c activity.Call, result T, fnErr error) (resume func(), done <-chan attemptAnswer[T]) {
	started, resumed := make(chan struct{}), make(chan struct{})
	out := make(chan attemptAnswer[T], 1)
	go func() {
		got, err := activity.Do(ctx, s, c, func(context.Context) (T, error) {
			close(started)
			<-resumed
			return result, fnErr
		})
		out <- attemptAnswer[T]{got, err}
	}()
	<-started
	return func() { close(resumed) }, out
}

// A stale attempt whose reservation was lost holds the same fence number (1) as the attempt
// that reserved the key again. It must not complete the new row with its own result, nor answer
// the new caller with it.
func TestLostReservationStaleAttemptCannotComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	stale := call(t, "order-1/charge", map[string]int{"amount": 100})
	stale.DownstreamDeduplicates = true
	stale.Lease = time.Hour
	fresh := stale
	fresh.Fingerprint = call(t, "order-1/charge", map[string]int{"amount": 999}).Fingerprint // another request

	resumeStale, staleDone := pausedAttempt(ctx, s, stale, 100, nil)
	loseReceipt(t, schema, stale.Key)
	resumeFresh, freshDone := pausedAttempt(ctx, s, fresh, 999, nil)

	resumeStale()
	st := <-staleDone
	require.Error(t, st.err, "the stale attempt completed a receipt it no longer held")
	require.NotEqual(t, 100, st.out)
	state, fence := receiptState(t, schema, fresh.Key)
	require.Equal(t, operator.StatePending, state, "the stale attempt wrote the new reservation's receipt")
	require.Equal(t, int64(1), fence)

	resumeFresh()
	fr := <-freshDone
	require.NoError(t, fr.err)
	require.Equal(t, 999, fr.out, "the new caller got the stale attempt's result")

	// And the stale caller, asking again, learns that the key now names another request.
	_, err := activity.Do(ctx, s, stale, func(context.Context) (int, error) {
		t.Error("called for a key recorded with another request")
		return 0, nil
	})
	require.ErrorAs(t, err, new(*activity.MismatchError))
}

// The stale attempt's release must not end the new reservation's live lease: a third attempt
// would then run beside the second.
func TestLostReservationStaleAttemptCannotRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{InProgressWait: -1})
	c := call(t, "order-2/charge", map[string]int{"amount": 100})
	c.DownstreamDeduplicates = true
	c.Lease = time.Hour

	resumeStale, staleDone := pausedAttempt(ctx, s, c, 0, errors.New("502 from the provider")) // retryable: releases
	loseReceipt(t, schema, c.Key)
	resumeSecond, secondDone := pausedAttempt(ctx, s, c, 7, nil)

	resumeStale()
	require.Error(t, (<-staleDone).err)
	_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
		t.Error("a third attempt ran beside the second, whose lease the stale attempt released")
		return 0, nil
	})
	require.ErrorAs(t, err, new(*activity.InProgressError))

	resumeSecond()
	require.Equal(t, 7, (<-secondDone).out)
}

// A receipt purged while pending and then reserved again is a new reservation: the attempt that
// held the old one cannot write to it either.
func TestPurgedPendingReceiptReservedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	c := call(t, "order-3/charge", map[string]int{"amount": 100})
	c.Lease = time.Hour
	resumeOld, oldDone := pausedAttempt(ctx, s, c, 1, nil)
	loseReceipt(t, schema, c.Key)
	resumeNew, newDone := pausedAttempt(ctx, s, c, 2, nil)
	resumeOld()
	require.ErrorAs(t, (<-oldDone).err, new(*activity.FencedOutError))
	resumeNew()
	require.Equal(t, 2, (<-newDone).out)
	got, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	require.Equal(t, 2, got, "the receipt records the old attempt's result")
}

// An attempt that learns on a heartbeat that another attempt took its receipt over is
// cancelled, so that it stops calling the downstream beside the attempt that holds the key.
func TestHeartbeatOfAFencedOutAttemptCancelsIt(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newWorkflowEnv(t)
	env.SetTestTimeout(30 * time.Second)
	db := pgtest.Pool(t)
	var (
		setupErr error // the activity runs on the SDK's goroutine: the test's goroutine checks this
		cause    error
		calls    int
		tookOver = make(chan struct{})
	)
	require.NoError(t, activity.Register(env, s, "Slow", func(ctx context.Context, _ struct{}) (int, error) {
		tok, _ := keys.TokenFrom(ctx)
		// This attempt is paused past its lease; another attempt takes the receipt over.
		c, err := callOf(db, schema, tok)
		if err == nil {
			err = moveLeaseEnd(db, schema, c.Key, time.Second)
		}
		if err != nil {
			setupErr = err
			return 0, temporal.NewNonRetryableApplicationError(err.Error(), "TestSetup", err)
		}
		c.DownstreamDeduplicates = true
		go func() {
			defer close(tookOver)
			_, _ = activity.Do(context.Background(), s, c, func(context.Context) (int, error) { return 2, nil })
		}()
		<-tookOver
		for range 50 { // a batch activity: one item per heartbeat
			time.Sleep(50 * time.Millisecond)
			sdkactivity.RecordHeartbeat(ctx)
			if ctx.Err() != nil {
				cause = context.Cause(ctx)
				return 0, ctx.Err()
			}
			calls++
		}
		return 1, nil
	}, activity.Options{DownstreamDeduplicates: true}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (int, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: 300 * time.Millisecond,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		var n int
		err := workflow.ExecuteActivity(ctx, "Slow", struct{}{}).Get(ctx, &n)
		return n, err
	}, workflow.RegisterOptions{Name: "SlowWorkflow"})
	env.ExecuteWorkflow("SlowWorkflow")
	require.NoError(t, setupErr, "set up the takeover")
	var n int
	if err := env.GetWorkflowError(); err == nil {
		require.NoError(t, env.GetWorkflowResult(&n))
	}
	require.ErrorAs(t, cause, new(*activity.FencedOutError), "the fenced-out attempt went on running")
	require.Less(t, calls, 50)
	require.NotEqual(t, 1, n, "the fenced-out attempt's result was answered")
}

// callOf reads back the key and fingerprint of the receipt with token tok. It returns an error
// rather than failing the test: it is called from an activity, off the test's goroutine.
func callOf(db *pgxpool.Pool, schema string, tok keys.Token) (activity.Call, error) {
	var (
		c   activity.Call
		sum []byte
	)
	err := db.QueryRow(context.Background(),
		"SELECT namespace, tenant, operation, id, fingerprint, fingerprint_version FROM "+schema+".receipts WHERE token = $1", string(tok)).
		Scan(&c.Key.Namespace, &c.Key.Tenant, &c.Key.Operation, &c.Key.ID, &sum, &c.Fingerprint.Version)
	if err != nil {
		return activity.Call{}, fmt.Errorf("read back the receipt of token %s: %w", tok, err)
	}
	copy(c.Fingerprint.Sum[:], sum)
	return c, nil
}
