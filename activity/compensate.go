package activity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
)

// ErrNotACompensation is returned by ForwardSettled outside a compensation that runs under a
// receipt.
var ErrNotACompensation = errors.New("not a compensation running under a receipt")

type runningKey struct{}

// running is what an attempt's context says about the call it runs under, for ForwardSettled.
type running struct {
	store  *Store
	call   Call
	passes passes // ForEach's, in this attempt
}

func withRunning(ctx context.Context, s *Store, c Call) context.Context {
	return context.WithValue(ctx, runningKey{}, &running{store: s, call: c})
}

// ForwardSettled tells a compensation whether "the forward effect is not there" is final. Call
// it when the downstream answers that there is nothing to undo (no charge under the forward
// step's token): the forward request may still be in flight — the saga compensates once the
// forward activity's last attempt has timed out, while the downstream may still be processing
// that attempt's request — or the downstream's search may lag its writes. Concluding "nothing
// to undo" then would record it under the compensation's receipt and replay it forever, and the
// charge would land unrefunded a moment later.
//
// It returns nil when the forward step's outcome is settled: its receipt is completed or failed,
// or its last attempt ended (fenced out, released, or its lease over) at least the downstream's
// settle time ago (Options.DownstreamSettleTime of the compensation, which should be the forward
// downstream's), or it ended having certainly sent nothing. A forward step with no receipt at
// all (it never reserved its key, or its asynchronous reservation was lost) counts as settled
// once the settle time has passed since the compensation was scheduled, which the saga does
// only after every forward attempt ended. Otherwise it returns a retryable
// *ForwardUnsettledError (ErrTypeForwardUnsettled) whose RetryAfter is when the answer may be
// final: return it, and the compensation is retried and asks the downstream again.
//
//	r, err := payments.Refund(ctx, forwardToken)
//	if err == nil && r.Status == downstream.RefundNoCharge {
//		if err := activity.ForwardSettled(ctx); err != nil {
//			return downstream.Refund{}, err // retried until the charge has landed or cannot
//		}
//	}
//
// It must be called in a compensation scheduled by saga.Step (keys.WithCompensation) whose
// activity runs under a receipt (Register or RegisterTx); elsewhere it returns an error
// matching ErrNotACompensation.
func ForwardSettled(ctx context.Context) error {
	rc, _ := ctx.Value(runningKey{}).(*running)
	forward, ok := keys.CompensatedKeyFrom(ctx)
	if rc == nil || !ok {
		return fmt.Errorf("activity.ForwardSettled: %w: call it in a compensation scheduled by saga.Step (keys.WithCompensation) whose activity runs registered with Register or RegisterTx",
			ErrNotACompensation)
	}
	settle := rc.call.settleTime()
	unsettled := func(wait time.Duration) error {
		return &ForwardUnsettledError{Forward: forward, RetryAfter: rc.store.retryAfter(wait)}
	}
	r, err := rc.store.read(ctx, forward)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if since := time.Since(sdkactivity.GetInfo(ctx).ScheduledTime); since < settle {
			return unsettled(settle - since)
		}
		return nil
	case err != nil:
		return &StoreError{Op: "read forward", Key: forward, Err: err}
	case r.state != StatePending:
		return nil // completed or failed: the outcome is recorded
	case r.lease > 0:
		return unsettled(r.lease + settle) // a forward attempt is still running
	case !r.effectPossible:
		return nil // its last attempt certainly sent nothing
	case -r.lease < settle:
		return unsettled(settle + r.lease)
	}
	return nil
}
