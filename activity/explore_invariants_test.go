// The invariants the explorer checks: as an attempt calls the downstream and as it finishes, and
// after a history, once every key has been driven to a final answer.

package activity

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/schema"
)

// checkCall is called when a reaches the downstream call.
func (x *explorer) checkCall(a *explAttempt) error {
	if a.heartbeatAfterLoss {
		return fmt.Errorf("attempt %d calls the downstream after a heartbeat found that it lost the receipt", a.id)
	}
	live := func(b *explAttempt) bool { return !b.finished && !b.leaseEndedByFault && !b.lost }
	for _, b := range x.attempt {
		if b != a && b.k == a.k && b.inFn && live(b) && live(a) {
			return fmt.Errorf("attempts %d and %d of %s run at once, and no fault ended %d's lease", b.id, a.id, a.k.key.ID, b.id)
		}
	}
	a.called = true
	if !a.k.dedup && (a.leaseEndedByFault || a.lost) {
		if a.faultOutsideFn {
			return fmt.Errorf("attempt %d calls a downstream that does not deduplicate after its lease ended while it was outside the function (reconciling), without checking its lease again", a.id)
		}
		a.zombie = true
		x.logf("attempt %d calls although a fault ended its lease", a.id)
	}
	return nil
}

func (x *explorer) finished(a *explAttempt) error {
	a.finished = true
	x.logf("attempt %d finished: %+v, %v", a.id, a.result, a.err)
	if a.err == nil {
		if a.result.Payload != a.payload {
			return fmt.Errorf("attempt %d (request %d) got a result recorded for request %d: %+v", a.id, a.payload, a.result.Payload, a.result)
		}
		if x.successes[a.k] == nil {
			x.successes[a.k] = map[int][]explResult{}
		}
		x.successes[a.k][a.payload] = append(x.successes[a.k][a.payload], a.result)
	}
	if errors.Is(a.err, ErrStore) && !a.storeFault {
		return fmt.Errorf("attempt %d got a store error, though none of its statements failed: %v", a.id, a.err)
	}
	if errors.Is(a.err, ErrPayloadMismatch) && a.called {
		return fmt.Errorf("attempt %d called the downstream and then got a payload mismatch", a.id)
	}
	return nil
}

// resolve drives k to a final answer the way Temporal's retries would, once time has passed:
// every held request lands, every lease ends past the settle time, and a clean attempt runs.
func (x *explorer) resolve(k *explKey) error {
	for round := range 5 {
		if err := x.endLease(k, true); err != nil {
			return err
		}
		payload := 0
		if round%2 == 1 {
			payload = 1 // the receipt may hold the other request
		}
		if err := x.start(k, payload); err != nil {
			return err
		}
		if err := x.drain(); err != nil {
			return err
		}
		a := x.attempt[len(x.attempt)-1]
		var appErr *temporal.ApplicationError
		switch {
		case a.err == nil, errors.Is(a.err, ErrPayloadMismatch) && round > 0:
			return nil
		case errors.Is(a.err, ErrPayloadMismatch):
			continue
		case errors.As(toTemporal(a.err), &appErr) && appErr.NonRetryable():
			if !finalTypes[appErr.Type()] {
				return fmt.Errorf("%s ended with a %s error, which is not an outcome of the intent: %v", k.key.ID, appErr.Type(), a.err)
			}
			if errors.Is(a.err, ErrOutcomeUnknown) && k.reconcile {
				return fmt.Errorf("%s ended OutcomeUnknown although a reconcile function could tell: %v", k.key.ID, a.err)
			}
			if errors.Is(a.err, ErrOutcomeUnknown) && k.dedup && !k.forgotten {
				return fmt.Errorf("%s ended OutcomeUnknown although its downstream deduplicates and remembers the token: %v", k.key.ID, a.err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s did not reach a final answer after every lease ended and requests landed", k.key.ID)
}

// finalTypes are the errors that may end an intent: the downstream's own answers, and the
// state machine's refusals. A reconcile function's error (the lookup's 401) is not among them.
var finalTypes = map[string]bool{
	"Declined": true, "DownstreamMismatch": true, ErrTypePayloadMismatch: true, ErrTypeOutcomeUnknown: true, ErrTypeBeyondHorizon: true,
}

func (x *explorer) checkFinal() error {
	ctx := context.Background()
	for _, k := range x.keys {
		tok := k.key.Token()
		// A zombie — an attempt whose lease a fault had ended (a worker paused past its lease)
		// and that then called a downstream that does not deduplicate — cannot be fenced by
		// anything outside the downstream; the README states the limit. Its effects are counted
		// apart, and every other attempt together has at most one.
		zombies := 0
		for a, n := range x.down.by[tok] {
			if a.zombie {
				zombies += n
			}
		}
		if n := x.down.effects[tok] - zombies; n > 1 {
			return fmt.Errorf("%s: %d effects under token %s (and %d by zombies)", k.key.ID, n, tok, zombies)
		}
		for payload, results := range x.successes[k] {
			for _, r := range results[1:] {
				if r != results[0] {
					return fmt.Errorf("%s request %d: results differ between attempts: %+v and %+v", k.key.ID, payload, results[0], r)
				}
			}
			if len(results) > 0 && x.down.effects[tok] == 0 {
				return fmt.Errorf("%s: a result was returned but the downstream has %d effects", k.key.ID, x.down.effects[tok])
			}
		}
	}
	// Unresolved receipts are counted and survive any purge.
	var want int64
	if err := x.pool.QueryRow(ctx, "SELECT count(*) FROM "+x.table()+" WHERE "+schema.Unresolved).Scan(&want); err != nil {
		return err
	}
	s, _ := NewStore(x.pool, &Config{Schema: x.schema})
	op := operatorFor(s)
	got, err := op.Unresolved(ctx)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("Unresolved counts %d receipts, %d are unresolved", got, want)
	}
	if err := x.expire("true"); err != nil {
		return err
	}
	for {
		n, err := op.Purge(ctx, 0)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	var left int64
	if err := x.pool.QueryRow(ctx, "SELECT count(*) FROM "+x.table()).Scan(&left); err != nil {
		return err
	}
	if left != want {
		return fmt.Errorf("after the retention, Purge left %d receipts; %d are unresolved and must stay, the rest must go", left, want)
	}
	return nil
}
