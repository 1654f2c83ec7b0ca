package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/internal/schema"
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
	rc, _ := ctx.Value(runningKey{}).(*running)
	forward, ok := keys.CompensatedKeyFrom(ctx)
	if rc == nil || !ok {
		return fmt.Errorf("activity.ForwardSettled: %w: call it in a compensation scheduled by saga.Saga.Step (keys.WithCompensation) whose activity runs registered with Register or RegisterTx",
			ErrNotACompensation)
	}
	settle := rc.call.settleTime()
	unsettled := func(wait time.Duration) error {
		return &ForwardUnsettledError{Forward: forward, RetryAfter: rc.store.retryAfter(wait)}
	}
	s := rc.store
	var (
		state               string
		leaseUS, finishedUS *int64
		effectPossible      bool
	)
	err := s.queryRow(ctx, s.receipts, s.sql.settings, fmt.Sprintf(readForward, s.table()),
		forward.Namespace, forward.Tenant, forward.Operation, forward.ID).Scan(&state, &leaseUS, &effectPossible, &finishedUS)
	lease := usOf(leaseUS)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if since := time.Since(sdkactivity.GetInfo(ctx).ScheduledTime); since < settle {
			return unsettled(settle - since)
		}
		return nil
	case err != nil:
		return &StoreError{Op: "read forward", Key: forward, Err: err}
	case state != schema.StatePending:
		// Completed or failed: the effect may have happened up to the moment it was recorded.
		if since := usOf(finishedUS); since < settle {
			return unsettled(settle - since)
		}
		return nil
	case lease > 0:
		return unsettled(lease + settle) // a forward attempt is still running
	case !effectPossible:
		return nil // its last attempt certainly sent nothing
	case -lease < settle:
		return unsettled(settle + lease)
	}
	return nil
}

// readForward reads what ForwardSettled needs of the forward step's receipt (%s is the table; $1–$4
// its key): its state, the time left on its lease in microseconds (negative once ended), whether
// an effect is possible, and how long ago it was finished (completed or failed; updated_at for a
// receipt from before completed_at was always set).
const readForward = `SELECT state, (extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint, effect_possible,
	CASE WHEN state <> 'pending' THEN (extract(epoch FROM now() - coalesce(completed_at, updated_at)) * 1000000)::bigint END
FROM %s WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)`

func usOf(us *int64) time.Duration {
	if us == nil {
		return 0
	}
	return time.Duration(*us) * time.Microsecond
}
