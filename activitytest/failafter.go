package activitytest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
)

// retryAfterFault runs one intent's attempts (run) after faults makes the downstream apply the
// first request and lose its answer, as Temporal retries them, and fails tb unless the intent
// had one effect and ended in its result or OutcomeUnknown. Between attempts, passTime lets
// Temporal's backoff and the settle time pass.
func retryAfterFault[Out any](tb testing.TB, fault Fault, faults Faults, fx *counter, field string, passTime func(), run func(identity) attempt[Out]) {
	tb.Helper()
	path := fmt.Sprintf("%s (%s)", PathFailAfterEffect, fault)
	who, before := firstAttempt(), fx.now()
	// Every item of a batch has its request applied and its answer lost, so that the retries
	// run each item again, and an item that is not sent under its own token is seen.
	faults.FailNext(slices.Repeat([]Fault{fault}, max(1, len(fx.want)))...)
	var (
		last attempt[Out]
		errs []string
	)
	for range maxAttempts {
		last = run(who)
		if last.err == nil || !retryable(last.err) {
			break
		}
		errs = append(errs, fmt.Sprintf("attempt %d: %v", who.attempt, last.err))
		passTime()
		who = who.retry()
	}
	t := fx.tally(fx.since(before))
	switch n := t.n; {
	case n == 0 && last.err == nil:
		tb.Errorf("activitytest: %s: 0 effects, want 1: either the downstream took the request for an earlier intent's (a key shared by intents: send the intent's token, keys.TokenFrom), or %s fails a downstream whose effects are not the ones counted%s", path, field, t.note)
	case n > 1 && len(errs) == 0:
		tb.Errorf("activitytest: %s: %d effects for one intent in one attempt, want 1: the request was sent again within the attempt. net/http sends a request that carries an Idempotency-Key again by itself when a reused connection breaks after it was written, which a downstream that does not deduplicate applies twice: send through downstream.Transport, which turns that off, and leave the retry to Temporal%s", path, n, t.note)
	case n > 1:
		tb.Errorf("activitytest: %s: %d effects for one intent, want 1: the retry had the effect again. An error after the request was sent is no proof that nothing happened: mark an error activity.NotApplied only when the downstream says it did nothing, and send the token (keys.TokenFrom) as the idempotency key%s. The attempts: %s", path, n, t.note, strings.Join(errs, "; "))
	case last.err != nil && retryable(last.err):
		tb.Errorf("activitytest: %s: still failing after %d attempts, though the effect happened: %s. If the downstream refused the key with other parameters, the activity's request changes between attempts (a timestamp, a random ID): build it only from the input and the token", path, maxAttempts, strings.Join(append(errs, fmt.Sprintf("attempt %d: %v", who.attempt, last.err)), "; "))
	case last.err != nil && !isType(last.err, activity.ErrTypeOutcomeUnknown):
		tb.Errorf("activitytest: %s: the intent ended in a failure, though its effect happened: %v. A workflow would take an effect that happened for one that did not (and compensate nothing). Return a retryable error when the answer is lost, so that the retry asks again under the same token", path, last.err)
	}
}

// retryable reports whether Temporal retries an attempt that failed with err.
func retryable(err error) bool {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return !appErr.NonRetryable()
	}
	var canceled *temporal.CanceledError
	return !errors.As(err, &canceled)
}
