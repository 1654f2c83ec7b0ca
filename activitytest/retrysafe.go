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
	// of your fake, a query of your table. Required. The check compares counts before and after
	// each path, so nothing else may add to them meanwhile: give each check a downstream or
	// counter of its own when tests run in parallel.
	Effects func() int
	// Store is the store to run on; it must come from NewStore. Default: a new one.
	Store *activity.Store
}

// The paths RequireRetrySafe runs, as its failures name them.
const (
	PathCrashBeforeReport = "crash before report"
	PathCrashAfterEffect  = "crash after the effect, before the receipt"
	PathTimeoutWhileRuns  = "timeout while the first attempt still runs"
	PathOtherPayload      = "a different payload under the same key"
)

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
//   - a different payload under the same key: refused with tempotent.PayloadMismatch, and no
//     effect.
//
// Each attempt runs as Temporal runs it: registered with activity.Register on a
// TestActivityEnvironment with tempotent's interceptor, its key given with keys.Given. A crash
// is an attempt held after its function returned (before its receipt is written) and never let
// go; a lease ends by moving it into the past in the store. A failure names the path and what
// was counted.
func RequireRetrySafe[In, Out any](tb testing.TB, c Check[In, Out]) {
	tb.Helper()
	if c.Activity == nil || c.Effects == nil {
		tb.Fatalf("activitytest: RequireRetrySafe needs Check.Activity and Check.Effects (a counter of the activity's effects)")
	}
	if c.Store == nil {
		c.Store = NewStore(tb, nil)
	}
	if fpIn, fpOther := fingerprint(tb, c.Input), fingerprint(tb, c.Other); fpIn == fpOther {
		tb.Fatalf("activitytest: Check.Other fingerprints like Check.Input; give a request that differs from it, so that the mismatch path can be checked")
	}
	r := &runner[In, Out]{tb: tb, c: c, ts: testStoreOf(tb, c.Store)}
	r.crashBeforeReport()
	r.crashAfterEffect(false)
	r.crashAfterEffect(true)
	r.otherPayload()
}

// runner runs one Check.
type runner[In, Out any] struct {
	tb testing.TB
	c  Check[In, Out]
	ts *testStore
}

// activityName is the name the activity is registered under, and its keys' operation.
const activityName = "ActivityUnderTest"

// attempt is the outcome of one execution.
type attempt[Out any] struct {
	out   Out
	err   error
	token keys.Token
}

// execute runs one attempt of the activity with the intent id, as Temporal runs it; hold, when
// set, runs after the activity function returned, before the receipt is written.
func (r *runner[In, Out]) execute(id string, in In, hold func(keys.Token)) attempt[Out] {
	env := NewActivityEnv(r.tb, activityName, id)
	var a attempt[Out]
	err := activity.Register(env, r.c.Store, activityName, func(ctx context.Context, in In) (Out, error) {
		a.token, _ = keys.TokenFrom(ctx)
		out, err := r.c.Activity(ctx, in)
		if hold != nil {
			hold(a.token)
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
	id, before := r.newID("crash-before-report"), r.c.Effects()
	first := r.execute(id, r.c.Input, nil)
	if first.err != nil {
		tb.Fatalf("activitytest: %s: the activity failed on its own with Check.Input: %v", PathCrashBeforeReport, first.err)
	}
	if n := r.c.Effects() - before; n != 1 {
		tb.Fatalf("activitytest: %s: the first attempt had %d effects, want 1: Check.Effects does not count this activity's effect", PathCrashBeforeReport, n)
	}
	again := r.execute(id, r.c.Input, nil)
	if n := r.c.Effects() - before; n != 1 {
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1: the retry of an attempt that completed had an effect again", PathCrashBeforeReport, n)
	}
	if again.err != nil || !reflect.DeepEqual(again.out, first.out) {
		tb.Errorf("activitytest: %s: the retry returned %+v (error %v), the first attempt %+v: a workflow could see two outcomes", PathCrashBeforeReport, again.out, again.err, first.out)
	}
}

// crashAfterEffect runs an attempt that has its effect and is held before its receipt is
// written; its lease ends and a second attempt takes over. With wake, the first attempt is let
// go once the second finished (a timeout while it still ran); without, it never is while the
// check runs (its worker died).
func (r *runner[In, Out]) crashAfterEffect(wake bool) {
	tb := r.tb
	tb.Helper()
	path, name := PathCrashAfterEffect, "crash-after-effect"
	if wake {
		path, name = PathTimeoutWhileRuns, "timeout-while-running"
	}
	id, before := r.newID(name), r.c.Effects()
	held, release := make(chan keys.Token, 1), make(chan struct{})
	var (
		first attempt[Out]
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		first = r.execute(id, r.c.Input, func(tok keys.Token) {
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
	second := r.execute(id, r.c.Input, nil)
	n := r.c.Effects() - before
	switch {
	case n == 0:
		tb.Errorf("activitytest: %s: 0 effects for this intent, want 1: the downstream took its request for an earlier intent's. Send the intent's token (keys.TokenFrom) as the idempotency key; a key made of other IDs is shared by intents that must each have their effect", path)
	case n > 1:
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1: the attempt that took over had an effect again. Send the token (keys.TokenFrom) as the downstream's idempotency key, and set Options.DownstreamDeduplicates only for a downstream that deduplicates on it", path, n)
	case second.err != nil && !isType(second.err, activity.ErrTypeOutcomeUnknown):
		tb.Errorf("activitytest: %s: the attempt that took over failed: %v", path, second.err)
	}
	if !wake {
		return
	}
	close(release)
	wg.Wait()
	if second.err == nil && (first.err != nil || !reflect.DeepEqual(first.out, second.out)) {
		tb.Errorf("activitytest: %s: the late attempt returned %+v (error %v), the attempt that took over %+v: a workflow could see two outcomes", path, first.out, first.err, second.out)
	}
}

func (r *runner[In, Out]) otherPayload() {
	tb := r.tb
	tb.Helper()
	id := r.newID("other-payload")
	if first := r.execute(id, r.c.Input, nil); first.err != nil {
		tb.Fatalf("activitytest: %s: the activity failed on its own with Check.Input: %v", PathOtherPayload, first.err)
	}
	before := r.c.Effects()
	other := r.execute(id, r.c.Other, nil)
	if n := r.c.Effects() - before; n != 0 {
		tb.Errorf("activitytest: %s: %d effects, want 0: a request reusing another's key was carried out", PathOtherPayload, n)
	}
	if !isType(other.err, activity.ErrTypePayloadMismatch) {
		tb.Errorf("activitytest: %s: got %+v (error %v), want a %s error", PathOtherPayload, other.out, other.err, activity.ErrTypePayloadMismatch)
	}
}

// endLease moves the lease of the receipt under token into the past, by more than the settle
// time, as a worker that died long enough ago leaves it.
func (r *runner[In, Out]) endLease(path string, token keys.Token) {
	settle := r.c.Options.DownstreamSettleTime
	if settle <= 0 {
		settle = activity.DownstreamSettleTimeDefault
	}
	tag, err := r.ts.pool.Exec(context.Background(), fmt.Sprintf(
		"UPDATE %q.receipts SET lease_expires_at = now() - $2::bigint * interval '1 microsecond' WHERE token = $1 AND state = 'pending'", r.ts.schema),
		string(token), (settle + time.Second).Microseconds())
	if err != nil || tag.RowsAffected() != 1 {
		r.tb.Fatalf("activitytest: %s: end the held attempt's lease: %v (%d receipts pending under its token)", path, err, tag.RowsAffected())
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
