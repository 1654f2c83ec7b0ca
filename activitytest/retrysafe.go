package activitytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// Check is an activity as RequireRetrySafe runs it.
type Check[In, Out any] struct {
	// Activity is the function you register with activity.Register, and Options the options
	// you register it with.
	Activity func(context.Context, In) (Out, error)
	Options  activity.Options
	// Input is a request the activity succeeds with; Other a request that differs from it (the
	// same key with another payload must be refused).
	Input, Other In
	// Effects counts the activity's effects so far: a recording Downstream's Effects, a counter
	// of your fake, a query of your table. Required, unless Items and ItemEffects are set. The
	// check compares counts before and after each path and wants one effect per intent, so
	// nothing else may add to them meanwhile: give each check a downstream or counter of its own
	// when tests run in parallel.
	Effects func() int
	// Items and ItemEffects declare a batch activity (activity.ForEach over its input's items),
	// which has one effect per item: Items returns the IDs of an input's items, as Items.ID
	// names them; ItemEffects counts the effects so far of each item by that ID (a Downstream's
	// EffectsOn per item path, a GROUP BY of your table). With them the check counts per item:
	// on every path each item of the intent must have exactly one effect across all attempts,
	// and a failure names the items that had none or more than one. Effects is then not used.
	Items       func(In) []string
	ItemEffects func() map[string]int
	// Faults fails the next requests of the activity's downstream on purpose, for the retry
	// Temporal runs most often: a request that had its effect and whose answer was lost (a 500,
	// a dropped connection), then the activity's retry. A Downstream (NewDownstream) does, and
	// so does a FaultProxy in front of a fake of your own. Required by RequireRetrySafe.
	Faults Faults
	// Store is the store to run on; it must come from NewStore. Default: a new one.
	Store *activity.Store
}

// Faults is a downstream that fails its next requests on purpose, one fault per request in
// order: a Downstream, or a FaultProxy in front of any HTTP downstream.
type Faults interface {
	FailNext(faults ...Fault)
}

// The paths RequireRetrySafe runs, as its failures name them.
const (
	PathCrashBeforeReport = "crash before report"
	PathCrashAfterEffect  = "crash after the effect, before the receipt"
	PathTimeoutWhileRuns  = "timeout while the first attempt still runs"
	PathNewRun            = "crash after the effect, then the same intent in a new run (a reset)"
	PathFailAfterEffect   = "a failure after the effect, then Temporal's retry"
	PathOtherPayload      = "a different payload under the same key"
)

// maxAttempts bounds the retries RequireRetrySafe runs after a failure, as a retry policy's
// MaximumAttempts would.
const maxAttempts = 6

// RequireRetrySafe runs c's activity through the paths on which Temporal runs an activity more
// than once, each under a key of its own, and fails tb unless every path has exactly one effect
// per intent (counted by c.Effects) and every caller sees one outcome:
//
//   - crash before report: the attempt completes, its worker dies before Temporal hears of it,
//     and the retry runs with the same identity: it must replay the first result;
//   - crash after the effect, before the receipt: the attempt's effect happens, its worker
//     dies, its lease ends, and the next attempt takes over with the same token: it must not
//     have a second effect (a deduplicating downstream absorbs the repeat; otherwise the
//     receipt reconciles, or fails OutcomeUnknown without calling);
//   - timeout while the first attempt still runs: the same, but the first attempt wakes after
//     the takeover finished: its late write is fenced, and it must return what the takeover
//     recorded;
//   - the same crash, then the intent's attempt in a new run of the workflow (a reset: another
//     run ID and activity ID, attempt 1, the same key): it must not have a second effect;
//   - a failure after the effect (the downstream applies the request, then answers 500 or drops
//     the connection; c.Faults injects both), then Temporal's retries: one effect, and an
//     outcome that says the effect happened (the result, or OutcomeUnknown), never a failure;
//   - a different payload under the same key: refused with tempotent.PayloadMismatch, and no
//     effect.
//
// Each attempt runs as Temporal runs it: registered with activity.Register on a
// TestActivityEnvironment with tempotent's interceptor, its key given with keys.Given, and
// activity.GetInfo reporting what Temporal changes between attempts — the attempt number, a
// task token of its own, and on a reset another run and activity ID. A crash is an attempt held
// after its function returned (before its receipt is written) and never let go; a lease ends by
// moving it into the past in the store. A failure names the path and what was counted.
//
// A batch activity (activity.ForEach; Check.Items and Check.ItemEffects) is counted per item:
// on every path each item of the intent must have exactly one effect, and a failure names the
// items that had none or more than one. Its failure after the effect loses the answer of every
// item's first request, so that each item is run again under its own token. A crash after the
// effect (and a reset) holds the batch once ForEach returned and puts its items back in flight
// in the store — pending, their effects possible, their leases ended — as a worker that died
// with every item running leaves them: the takeover must take each item over under its token,
// in another process. The timeout path leaves the items settled: its takeover must replay them
// (an Items.Operation that changes between attempts pays them again).
//
// A takeover after a crash (the second and fourth paths) runs in a worker process of its own,
// as Temporal runs it on another worker: the test binary runs the test again, and activitytest's
// NewStore, NewDownstream and NewFaultProxy hand it the first process's store and downstreams,
// while everything else is new — a key kept in memory by the first attempt is gone, as it is
// after a crash. Downstreams the activity calls must therefore be reached through a Downstream
// or a FaultProxy; a fake kept in memory starts empty there, and the check says so. A check
// whose tb is not a test's (an example's) runs that attempt in its own process instead, and
// logs it.
func RequireRetrySafe[In, Out any](tb testing.TB, c Check[In, Out]) {
	tb.Helper()
	if c.Activity == nil {
		tb.Fatalf("activitytest: RequireRetrySafe needs Check.Activity")
	}
	fx := newCounter(tb, "Check", c.Effects, c.Items, c.ItemEffects, c.Input)
	if c.Faults == nil {
		tb.Fatalf("activitytest: RequireRetrySafe needs Check.Faults, to fail a request after its effect as a real downstream does: point the activity at a Downstream (NewDownstream) and give it as Faults, or put a FaultProxy (NewFaultProxy) in front of your own fake")
	}
	if c.Store == nil {
		c.Store = NewStore(tb, nil)
	}
	if fpIn, fpOther := fingerprint(tb, c.Input), fingerprint(tb, c.Other); fpIn.Matches(fpOther) {
		tb.Fatalf("activitytest: Check.Other fingerprints like Check.Input; give a request that differs from it, so that the mismatch path can be checked")
	}
	r := &runner[In, Out]{tb: tb, c: c, fx: fx, ts: testStoreOf(tb, c.Store), call: nextCall(tb)}
	if asWorkerAttempt(r, r.call) {
		return
	}
	r.crashBeforeReport()
	r.crashAfterEffect(crashed)
	r.crashAfterEffect(timedOut)
	r.crashAfterEffect(reset)
	r.failAfterEffect(Fail500AfterEffect)
	r.failAfterEffect(DropAfterEffect)
	r.otherPayload()
}

// runner runs one Check.
type runner[In, Out any] struct {
	tb   testing.TB
	c    Check[In, Out]
	fx   *counter
	ts   *testStore
	call int // which RequireRetrySafe call of the test this is
}

// activityName is the name the activity is registered under, and its keys' operation.
const activityName = "ActivityUnderTest"

// attempt is the outcome of one execution.
type attempt[Out any] struct {
	out   Out
	err   error
	token keys.Token
}

// execute runs one attempt of the activity with the intent id, as Temporal runs it, telling it
// who it is; hold, when set, runs after the activity function returned, before the receipt is
// written.
func (r *runner[In, Out]) execute(id string, who identity, in In, hold func(keys.Token, keys.Key)) attempt[Out] {
	env := newActivityEnv(r.tb, activityName, id, newAttemptInfo(who))
	var a attempt[Out]
	err := activity.Register(env, r.c.Store, activityName, func(ctx context.Context, in In) (Out, error) {
		a.token, _ = keys.TokenFrom(ctx)
		out, err := r.c.Activity(ctx, in)
		if hold != nil {
			k, _ := keys.FromActivity(ctx)
			hold(a.token, k)
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

// executeIn runs the activity registered as activityName in env with in, and decodes its result.
func executeIn[Out any](env *testsuite.TestActivityEnvironment, in any) (Out, error) {
	var out Out
	val, err := env.ExecuteActivity(activityName, in)
	if err == nil && val.HasValue() {
		err = val.Get(&out)
	}
	return out, err
}

func (r *runner[In, Out]) newID(path string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%s/%s", r.tb.Name(), path, hex.EncodeToString(b[:]))
}

func (r *runner[In, Out]) crashBeforeReport() {
	tb := r.tb
	tb.Helper()
	id, who, before := r.newID("crash-before-report"), firstAttempt(), r.fx.now()
	first := r.execute(id, who, r.c.Input, nil)
	if first.err != nil {
		tb.Fatalf("activitytest: %s: the activity failed on its own with Check.Input: %v", PathCrashBeforeReport, first.err)
	}
	r.fx.firstEffects(tb, PathCrashBeforeReport, r.fx.since(before))
	again := r.execute(id, who.retry(), r.c.Input, nil)
	if t := r.fx.tally(r.fx.since(before)); t.n != 1 {
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1: the retry of an attempt that completed had an effect again%s", PathCrashBeforeReport, t.n, t.note)
	}
	if again.err != nil || !reflect.DeepEqual(again.out, first.out) {
		tb.Errorf("activitytest: %s: the retry returned %+v (error %v), the first attempt %+v: a workflow could see two outcomes", PathCrashBeforeReport, again.out, again.err, first.out)
	}
}

// How the attempt that had its effect ended, for crashAfterEffect.
type ending int

const (
	crashed  ending = iota // its worker died: it is never let go
	timedOut               // it wakes once the attempt that took over finished
	reset                  // its worker died, and an operator reset the workflow
)

// crashAfterEffect runs an attempt that has its effect and is held before its receipt is
// written; its lease ends and a second attempt takes over: the retry in the same run, or the
// first attempt of a new run after a reset. When the first attempt timed out, it is let go once
// the second finished; otherwise it never is while the check runs (its worker died).
func (r *runner[In, Out]) crashAfterEffect(how ending) {
	tb := r.tb
	tb.Helper()
	path, name := PathCrashAfterEffect, "crash-after-effect"
	switch how {
	case timedOut:
		path, name = PathTimeoutWhileRuns, "timeout-while-running"
	case reset:
		path, name = PathNewRun, "new-run"
	}
	id, who, before := r.newID(name), firstAttempt(), r.fx.now()
	held, release := make(chan keys.Token, 1), make(chan struct{})
	var (
		first attempt[Out]
		batch keys.Key // the held attempt's key, whose items a batch has in flight
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		first = r.execute(id, who, r.c.Input, func(tok keys.Token, k keys.Key) {
			batch = k
			held <- tok
			<-release
		})
	})
	defer wg.Wait()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	var token keys.Token
	select {
	case token = <-held:
	case <-time.After(time.Minute):
		tb.Fatalf("activitytest: %s: the activity did not return within a minute", path)
	}
	r.endLease(path, token)
	if how != timedOut && r.fx.items != nil {
		r.itemsInFlight(path, batch)
	}
	next := who.retry()
	if how == reset {
		next = who.reset()
	}
	var (
		second attempt[Out]
		unseen counts
	)
	if how == timedOut {
		second = r.execute(id, next, r.c.Input, nil) // the first attempt's worker still runs
	} else {
		second, unseen = r.elsewhere(path, id, next)
	}
	t, u := r.fx.tally(r.fx.since(before).plus(unseen)), r.fx.tally(unseen)
	switch n := t.n; {
	case n > 1 && u.sum > 0:
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1, %d of them counted only in the worker process that took over: either the takeover had the effect again, or %s counts a fake kept in memory that the new process started empty. Reach such a fake through a FaultProxy (NewFaultProxy), which a worker process shares with the test, and send the token (keys.TokenFrom) as the idempotency key%s", path, n, u.sum, r.fx.field, t.note)
	case n == 0:
		tb.Errorf("activitytest: %s: 0 effects for this intent, want 1: the downstream took its request for an earlier intent's. Send the intent's token (keys.TokenFrom) as the idempotency key; a key made of other IDs is shared by intents that must each have their effect%s", path, t.note)
	case n > 1:
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1: the attempt that took over had an effect again. Send the token (keys.TokenFrom) as the downstream's idempotency key — not the attempt, the task token, the run or the activity ID, which Temporal changes between attempts, nor a key kept in memory, which the worker that takes over after a crash does not have — and set Options.DownstreamDeduplicates only for a downstream that deduplicates on it%s", path, n, t.note)
	case second.err != nil && !isType(second.err, activity.ErrTypeOutcomeUnknown):
		tb.Errorf("activitytest: %s: the attempt that took over failed, though the first one's effect happened: %v. If the downstream refused the key with other parameters, the activity's request changes between attempts (a timestamp, a random ID): build it only from the input and the token", path, second.err)
	}
	if how != timedOut {
		return
	}
	close(release)
	wg.Wait()
	if second.err == nil && (first.err != nil || !reflect.DeepEqual(first.out, second.out)) {
		tb.Errorf("activitytest: %s: the late attempt returned %+v (error %v), the attempt that took over %+v: a workflow could see two outcomes", path, first.out, first.err, second.out)
	}
}

// elsewhere runs an attempt in a worker process of its own (process.go), as Temporal runs a
// takeover after a crash on another worker, where nothing the first attempt kept in memory
// exists. unseen is the effects that process counted beyond those this one sees (a fake kept in
// memory).
func (r *runner[In, Out]) elsewhere(path, id string, who identity) (a attempt[Out], unseen counts) {
	r.tb.Helper()
	before := r.fx.now()
	a, theirs, err := inWorkerProcess[Out](r.tb, r.call, id, who)
	switch {
	case errors.Is(err, errNoWorkerProcess):
		r.tb.Logf("activitytest: %s: the takeover ran in this process: a check called from a test function runs it in a process of its own", path)
		return r.execute(id, who, r.c.Input, nil), nil
	case err != nil:
		r.tb.Fatalf("activitytest: %s: run the takeover in a worker process of its own: %v", path, err)
	}
	ours, unseen := r.fx.since(before), counts{}
	for item, n := range theirs {
		if n > ours[item] {
			unseen[item] = n - ours[item]
		}
	}
	return a, unseen
}

// failAfterEffect has the downstream apply the first attempt's request and lose the answer
// (fault), then runs the retries Temporal would, while the activity's error is retryable.
func (r *runner[In, Out]) failAfterEffect(fault Fault) {
	r.tb.Helper()
	id := r.newID("fail-after-effect")
	retryAfterFault(r.tb, fault, r.c.Faults, r.fx, "Check.Faults", r.passTime, func(who identity) attempt[Out] {
		return r.execute(id, who, r.c.Input, nil)
	})
}

func (r *runner[In, Out]) otherPayload() {
	tb := r.tb
	tb.Helper()
	id, who := r.newID("other-payload"), firstAttempt()
	if first := r.execute(id, who, r.c.Input, nil); first.err != nil {
		tb.Fatalf("activitytest: %s: the activity failed on its own with Check.Input: %v", PathOtherPayload, first.err)
	}
	before := r.fx.now()
	other := r.execute(id, who.retry(), r.c.Other, nil)
	if t := r.fx.tally(r.fx.since(before)); t.sum != 0 {
		tb.Errorf("activitytest: %s: %d effects, want 0: a request reusing another's key was carried out", PathOtherPayload, t.sum)
	}
	if !isType(other.err, activity.ErrTypePayloadMismatch) {
		tb.Errorf("activitytest: %s: got %+v (error %v), want a %s error", PathOtherPayload, other.out, other.err, activity.ErrTypePayloadMismatch)
	}
}

// endLease moves the lease of the receipt under token into the past, by more than the settle
// time, as a worker that died long enough ago leaves it.
func (r *runner[In, Out]) endLease(path string, token keys.Token) {
	settle := r.c.Options.WithDefaults().DownstreamSettleTime
	tag, err := r.ts.pool.Exec(context.Background(), fmt.Sprintf(
		"UPDATE %q.receipts SET lease_expires_at = now() - $2::bigint * interval '1 microsecond' WHERE token = $1 AND state = 'pending'", r.ts.schema),
		string(token), (settle + time.Second).Microseconds())
	if err != nil || tag.RowsAffected() != 1 {
		r.tb.Fatalf("activitytest: %s: end the held attempt's lease: %v (%d receipts pending under its token)", path, err, tag.RowsAffected())
	}
}

// passTime moves the lease of every pending receipt in the store (the activity's, and its
// items' in a batch) into the past by more than the settle time, as the time between two
// attempts does once Temporal's backoff and the settle time have passed.
func (r *runner[In, Out]) passTime() {
	settle := r.c.Options.WithDefaults().DownstreamSettleTime
	if _, err := r.ts.pool.Exec(context.Background(), fmt.Sprintf(
		"UPDATE %q.receipts SET lease_expires_at = now() - $1::bigint * interval '1 microsecond' WHERE state = 'pending'", r.ts.schema),
		(settle + time.Second).Microseconds()); err != nil {
		r.tb.Fatalf("activitytest: let time pass for the pending receipts: %v", err)
	}
}

func isType(err error, errType string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == errType
}

func fingerprint(tb testing.TB, v any) keys.Fingerprint {
	tb.Helper()
	fp, err := keys.FingerprintOf([]any{v})
	if err != nil {
		tb.Fatalf("activitytest: the request does not fingerprint: %v", err)
	}
	return fp
}
