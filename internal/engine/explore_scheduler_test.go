// The explorer's scheduler: the actions it hands an attempt parked at a point, the seeded choice
// of them, starting attempts, and running them one point at a time (park, await, resume, drain).

package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/keys"
)

// action is what the explorer tells an attempt parked at a point to do.
type action int

const (
	proceed     action = iota
	replyLost          // the statement runs and commits; its reply never arrives
	backendGone        // the backend was terminated before the statement ran

	heartbeatNow // at the heartbeat point: extend the lease
	skip         // at the heartbeat point: do not

	callOK       // the downstream applies the request and answers
	callLost     // it applies the request; the answer is lost
	callNotSent  // the request was never sent (connection refused)
	callInFlight // it holds the request and applies it later; the caller times out
	callDecline  // it declines: a final failure, no effect

	reconcileOK        // the lookup answers
	reconcileNotSent   // the lookup could not connect
	reconcileRefused   // the lookup is refused (a 401), as a non-retryable error
	reconcileAmbiguous // the lookup's connection broke

	lockRow // at a completion: another transaction locks the receipt first, and holds it
)

// point is where an attempt parks: a statement (by name), or "heartbeat", "call", "reconcile".
type event struct {
	a      *explAttempt
	point  string
	args   []any
	resume chan action
	done   bool
}

// runUntil runs a on with seeded actions until it parks at one of points, finishes, or has
// taken n steps.
func (x *explorer) runUntil(a *explAttempt, n int, points ...string) error {
	for range n {
		e, ok := x.parked[a]
		if !ok || slices.Contains(points, e.point) {
			return nil
		}
		if err := x.resume(a, x.chooseAction(e)); err != nil {
			return err
		}
	}
	return nil
}

func (x *explorer) parkedAttempts() []*explAttempt {
	var out []*explAttempt
	for _, a := range x.attempt { // in start order: deterministic
		if _, ok := x.parked[a]; ok {
			out = append(out, a)
		}
	}
	return out
}

func (x *explorer) chooseAction(e event) action {
	r := x.rng.IntN(100)
	switch e.point {
	case "heartbeat":
		if r < 35 {
			return heartbeatNow
		}
		return skip
	case "call":
		switch {
		case r < 40:
			return callOK
		case r < 60:
			return callLost
		case r < 70:
			return callNotSent
		case r < 90:
			return callInFlight
		}
		return callDecline
	case "reconcile":
		switch {
		case r < 50:
			return reconcileOK
		case r < 67:
			return reconcileNotSent
		case r < 84:
			return reconcileRefused
		}
		return reconcileAmbiguous
	case "read", "countUnresolved":
		if r < 10 {
			return backendGone
		}
		return proceed
	case "completeSkipLocked", "complete":
		if r < 15 {
			return lockRow
		}
	}
	switch {
	case r < 12:
		return replyLost
	case r < 20:
		return backendGone
	}
	return proceed
}

// start runs an attempt of k with request payload in its own store, as another worker would.
// It returns once the attempt has parked or finished.
func (x *explorer) start(k *explKey, payload int) error {
	a := &explAttempt{id: len(x.attempt), k: k, payload: payload, events: x.events}
	s, err := NewStore(x.pool, &Config{Schema: x.schema, InProgressWait: -1, StatementTimeout: time.Minute, LockTimeout: exploreLockTimeout})
	if err != nil {
		return err
	}
	s.receipts = &steppedBatcher{inner: x.pool, a: a, x: x}
	a.store = s
	x.attempt = append(x.attempt, a)
	c := Call{
		Key:                    k.key,
		Fingerprint:            k.payloads[payload],
		Lease:                  exploreLease,
		DownstreamDeduplicates: k.dedup,
		DownstreamSettleTime:   exploreSettle,
		// A retry reads with the plain lookup first; a first attempt reserves at once.
		Attempt: int32(1 + x.rng.IntN(2)),
	}
	if k.batch {
		c.DownstreamKeyMemory = math.MaxInt64
		if x.rng.IntN(2) == 0 {
			c.Attempt = 2 // a batch is retried more often than not: readTakeOver goes first
		}
	}
	if k.retired {
		// A retry after the retention is necessarily one scheduled before it.
		c.ScheduledAt = time.Now().Add(-2 * exploreRetention)
	}
	if k.reconcile {
		c.Reconcile = func(ctx context.Context, tok keys.Token) (any, bool, error) {
			switch a.park("reconcile", nil) {
			case reconcileNotSent:
				return nil, false, NotApplied(errors.New("lookup: dial tcp: connection refused"))
			case reconcileRefused:
				return nil, false, temporal.NewNonRetryableApplicationError("lookup: 401 Unauthorized", "DownstreamRejected", nil)
			case reconcileAmbiguous:
				return nil, false, errors.New("lookup: read: connection reset by peer")
			}
			r, ok := x.down.lookup(tok)
			return r, ok, nil
		}
	}
	x.logf("attempt %d starts: key %s payload %d", a.id, k.key.ID, payload)
	go func() {
		r, err := doTyped(context.Background(), s, c, func(ctx context.Context) (explResult, error) {
			a.inFn = true
			defer func() { a.inFn = false }()
			if a.park("heartbeat", nil) == heartbeatNow {
				_ = leaseFrom(ctx).extend(ctx, exploreLease)
				if ctx.Err() != nil {
					return explResult{}, context.Cause(ctx)
				}
			}
			tok, _ := keys.TokenFrom(ctx)
			mode := a.park("call", nil)
			return x.down.call(k, tok, payload, mode, a)
		})
		a.result, a.err = r, err
		a.events <- event{a: a, done: true}
	}()
	return x.await(a)
}

// park hands control to the explorer at point and waits to be told what to do.
func (a *explAttempt) park(point string, args []any) action {
	resume := make(chan action)
	a.events <- event{a: a, point: point, args: args, resume: resume}
	return <-resume
}

// await waits for a's next event: a's goroutine is the only one running.
func (x *explorer) await(a *explAttempt) error {
	select {
	case e := <-x.events:
		if e.a != a {
			return fmt.Errorf("attempt %d ran while attempt %d held control", e.a.id, a.id)
		}
		if e.done {
			return x.finished(a)
		}
		x.parked[a] = e
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("attempt %d blocked outside the explorer's points", a.id)
	}
}

func (x *explorer) resume(a *explAttempt, act action) error {
	e := x.parked[a]
	var callErr error
	if e.point == "call" {
		// The call happens now: whatever faults came while it waited here count.
		callErr = x.checkCall(a)
	}
	delete(x.parked, a)
	x.logf("attempt %d at %s: %s", a.id, e.point, actionName(act))
	if act == lockRow {
		if err := x.lock(a.k); err != nil {
			return err
		}
	}
	e.resume <- act
	if err := x.await(a); err != nil {
		return err
	}
	return callErr
}

// drain lets every parked attempt run to its end, without faults, and returns the first
// violation it saw on the way.
func (x *explorer) drain() error {
	first := x.unlockAll() // a completion waiting for a lock would wait out its lease
	for {
		parked := x.parkedAttempts()
		if len(parked) == 0 {
			return first
		}
		for _, a := range parked {
			if err := x.resume(a, cleanAction(x.parked[a].point)); err != nil && first == nil {
				first = err
			}
		}
	}
}

func cleanAction(point string) action {
	switch point {
	case "heartbeat":
		return skip
	case "call":
		return callOK
	case "reconcile":
		return reconcileOK
	}
	return proceed
}

func actionName(a action) string {
	names := []string{"proceed", "reply lost", "backend terminated", "heartbeat", "no heartbeat", "call ok", "call: answer lost",
		"call: not sent", "call: held by the downstream", "call: declined", "reconcile ok", "reconcile: not sent",
		"reconcile: refused", "reconcile: connection reset", "another transaction locks the receipt"}
	if int(a) < len(names) {
		return names[a]
	}
	return strconv.Itoa(int(a))
}
