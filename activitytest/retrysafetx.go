package activitytest

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/activity"
)

// CheckTx is a transactional activity (activity.RegisterTx) as RequireRetrySafeTx runs it. Its
// fields are Check's; Activity writes through tx, in the database of Store.
type CheckTx[In, Out any] struct {
	Activity     func(context.Context, pgx.Tx, In) (Out, error)
	Options      activity.Options
	Input, Other In
	// Effects counts the activity's local effects so far, for example the rows it wrote;
	// required. (A batch's items commit under receipts of their own, not in the activity's
	// transaction: check a ForEach batch with RequireRetrySafe.)
	Effects func() int
	// Faults, for an activity that also calls a downstream inside its transaction, fails that
	// downstream's next requests on purpose (a Downstream, or a FaultProxy in front of your
	// own): the check then runs a request that had its effect and lost its answer, whose
	// attempt rolls back its writes, and Temporal's retries.
	Faults Faults
	Store  *activity.Store
}

// The paths RequireRetrySafeTx runs beside PathCrashBeforeReport and PathOtherPayload.
const (
	PathRolledBack = "an attempt that failed after its writes"
	PathConcurrent = "a second attempt while the first has not committed"
)

// errInjected is the retryable failure RequireRetrySafeTx gives an attempt after its function
// wrote, so that its transaction rolls back.
var errInjected = errors.New("activitytest: the attempt failed after the activity's writes (injected)")

// RequireRetrySafeTx is RequireRetrySafe for an activity registered with activity.RegisterTx,
// whose effect is its writes and commits with its receipt: it fails tb unless
//
//   - crash before report: the retry replays the recorded result, and writes nothing;
//   - an attempt that failed after its writes (a retryable error; its transaction rolls back)
//     left no effect, and its retry has exactly one — an activity that writes outside tx (through
//     a pool of its own) keeps the first attempt's writes and adds the retry's;
//   - a second attempt while the first has not committed waits for it and returns its result,
//     with one effect;
//   - a different payload under the same key is refused with no effect.
func RequireRetrySafeTx[In, Out any](tb testing.TB, c CheckTx[In, Out]) {
	tb.Helper()
	if asWorker != nil {
		return // a worker process (process.go) runs one attempt of a RequireRetrySafe
	}
	if c.Activity == nil || c.Effects == nil {
		tb.Fatalf("activitytest: RequireRetrySafeTx needs CheckTx.Activity and CheckTx.Effects (a count of the activity's writes)")
	}
	fx := newCounter[In](tb, "CheckTx", c.Effects, nil, nil, c.Input)
	if c.Store == nil {
		c.Store = NewStore(tb, nil)
	}
	if fingerprint(tb, c.Input).Matches(fingerprint(tb, c.Other)) {
		tb.Fatalf("activitytest: CheckTx.Other fingerprints like CheckTx.Input; give a request that differs from it, so that the mismatch path can be checked")
	}
	r := &txRunner[In, Out]{runner: runner[In, Out]{tb: tb, c: Check[In, Out]{Options: c.Options}, fx: fx, ts: testStoreOf(tb, c.Store)}, c: c}

	id, who, before := r.newID("tx-crash-before-report"), firstAttempt(), fx.now()
	first := r.execute(id, who, c.Input, nil)
	if first.err != nil {
		tb.Fatalf("activitytest: %s: the activity failed on its own with CheckTx.Input: %v", PathCrashBeforeReport, first.err)
	}
	fx.firstEffects(tb, PathCrashBeforeReport, fx.since(before))
	again := r.execute(id, who.retry(), c.Input, nil)
	if t := fx.tally(fx.since(before)); t.n != 1 || again.err != nil || !reflect.DeepEqual(again.out, first.out) {
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1%s; the retry returned %+v (error %v), the first attempt %+v", PathCrashBeforeReport, t.n, t.note, again.out, again.err, first.out)
	}

	id, who, before = r.newID("tx-rolled-back"), firstAttempt(), fx.now()
	failed := r.execute(id, who, c.Input, func() error { return errInjected })
	if failed.err == nil {
		tb.Fatalf("activitytest: %s: the injected failure did not fail the attempt", PathRolledBack)
	}
	if t := fx.tally(fx.since(before)); t.sum != 0 {
		tb.Errorf("activitytest: %s: %d effects left by an attempt whose transaction rolled back, want 0: write through the tx RegisterTx gives the activity, not through a connection of your own", PathRolledBack, t.sum)
	}
	if retry := r.execute(id, who.retry(), c.Input, nil); retry.err != nil {
		tb.Errorf("activitytest: %s: the retry failed: %v", PathRolledBack, retry.err)
	}
	if t := fx.tally(fx.since(before)); t.n != 1 {
		tb.Errorf("activitytest: %s: %d effects for one intent after the retry, want 1%s", PathRolledBack, t.n, t.note)
	}

	r.concurrent()

	if c.Faults != nil {
		for _, fault := range []Fault{Fail500AfterEffect, DropAfterEffect} {
			id := r.newID("tx-fail-after-effect")
			retryAfterFault(tb, fault, c.Faults, fx, "CheckTx.Faults", r.passTime, func(who identity) attempt[Out] {
				return r.execute(id, who, c.Input, nil)
			})
		}
	}

	id, who = r.newID("tx-other-payload"), firstAttempt()
	if res := r.execute(id, who, c.Input, nil); res.err != nil {
		tb.Fatalf("activitytest: %s: the activity failed on its own with CheckTx.Input: %v", PathOtherPayload, res.err)
	}
	before = fx.now()
	other := r.execute(id, who.retry(), c.Other, nil)
	if t := fx.tally(fx.since(before)); t.sum != 0 || !isType(other.err, activity.ErrTypePayloadMismatch) {
		tb.Errorf("activitytest: %s: %d effects and error %v, want 0 and a %s error", PathOtherPayload, t.sum, other.err, activity.ErrTypePayloadMismatch)
	}
}

type txRunner[In, Out any] struct {
	runner[In, Out]
	c CheckTx[In, Out]
}

// execute runs one attempt; after, when set, runs once the activity's function returned, inside
// its transaction, and its error (if any) becomes the attempt's.
func (r *txRunner[In, Out]) execute(id string, who identity, in In, after func() error) attempt[Out] {
	env := newActivityEnv(r.tb, activityName, id, newAttemptInfo(who))
	var a attempt[Out]
	err := activity.RegisterTx(env, r.c.Store, activityName, func(ctx context.Context, tx pgx.Tx, in In) (Out, error) {
		out, err := r.c.Activity(ctx, tx, in)
		if err == nil && after != nil {
			err = after()
		}
		return out, err
	}, r.c.Options)
	if err != nil {
		a.err = err
		return a
	}
	a.out, a.err = executeIn[Out](env, in)
	return a
}

// concurrent holds the first attempt's transaction open after its writes, runs a second attempt
// beside it, and lets the first commit: the second waits on the receipt and replays it.
func (r *txRunner[In, Out]) concurrent() {
	tb := r.tb
	tb.Helper()
	id, who, before := r.newID("tx-concurrent"), firstAttempt(), r.fx.now()
	wrote, release := make(chan struct{}), make(chan struct{})
	var (
		first attempt[Out]
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		first = r.execute(id, who, r.c.Input, func() error { close(wrote); <-release; return nil })
	})
	<-wrote
	var second attempt[Out]
	wg.Go(func() { second = r.execute(id, who.retry(), r.c.Input, nil) })
	time.Sleep(100 * time.Millisecond) // the second attempt is waiting on the first's receipt
	close(release)
	wg.Wait()
	if first.err != nil {
		tb.Fatalf("activitytest: %s: the first attempt failed: %v", PathConcurrent, first.err)
	}
	if isType(second.err, activity.ErrTypeInProgress) {
		second = r.execute(id, who.retry().retry(), r.c.Input, nil) // it gave up waiting: Temporal retries it
	}
	if t := r.fx.tally(r.fx.since(before)); t.n != 1 || second.err != nil || !reflect.DeepEqual(first.out, second.out) {
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1%s; the second attempt returned %+v (error %v), the first %+v", PathConcurrent, t.n, t.note, second.out, second.err, first.out)
	}
}
