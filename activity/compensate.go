package activity

import (
	"context"

	"github.com/tempotent/tempotent/internal/engine"
)

// ErrNotACompensation is returned by ForwardSettled outside a compensation that runs under a
// receipt.
var ErrNotACompensation = engine.ErrNotACompensation

// ForwardSettled tells a compensation whether "the forward effect is not there" is final. Call
// it when the downstream answers that there is nothing to undo (no charge under the forward
// step's token): the forward request may still be in flight — the saga compensates once the
// forward activity's last attempt has timed out, while the downstream may still be processing
// that attempt's request — or the downstream's search may lag its writes (Stripe documents that
// its search does), so that a charge made a moment ago is not found yet. Concluding "nothing to
// undo" then would record it under the compensation's receipt and replay it forever, and the
// charge would stay unrefunded.
//
// It returns nil once the last moment at which the forward effect could have happened lies at
// least the downstream's settle time in the past (Options.DownstreamSettleTime of the
// compensation, which should be the forward downstream's). That moment is when the forward
// receipt was completed or failed, whatever its state: a completed receipt says the effect
// happened, not that the downstream's search shows it yet, and a failure may have been recorded
// after a request was sent (a 4xx after a send, an error classified as final by mistake). For a
// pending receipt it is when its last attempt ended (fenced out, released, or its lease over);
// a pending receipt whose last attempt certainly sent nothing (or that an operator resolved as
// not applied) is settled at once. A forward step with no receipt at all (it never reserved its
// key, or its asynchronous reservation was lost) counts as settled once the settle time has
// passed since the compensation was scheduled, which the saga does only after every forward
// attempt ended. Otherwise it returns a retryable *ForwardUnsettledError
// (ErrTypeForwardUnsettled) whose RetryAfter is the settle time left: return it, and the
// compensation is retried and asks the downstream again.
//
//	r, err := payments.Refund(ctx, forwardToken)
//	if err == nil && r.Status == downstream.RefundNoCharge {
//		if err := activity.ForwardSettled(ctx); err != nil {
//			return downstream.Refund{}, err // retried until the charge has landed or cannot
//		}
//	}
//
// It must be called in a compensation scheduled by saga.Saga.Step (keys.WithCompensation) whose
// activity runs under a receipt (Register or RegisterTx); elsewhere it returns an error
// matching ErrNotACompensation.
func ForwardSettled(ctx context.Context) error {
	return engine.ForwardSettled(ctx)
}
