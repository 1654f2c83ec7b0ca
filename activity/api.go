package activity

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
)

// Options says how a wrapped activity is keyed and what its downstream guarantees. The zero
// Options keys by ScopeWorkflow and treats the downstream as one that does not deduplicate.
type Options struct {
	// Keys chooses the key's scope, operation and explicit ID.
	Keys keys.Options
	// DownstreamDeduplicates: see Call.DownstreamDeduplicates.
	DownstreamDeduplicates bool
	// DownstreamKeyMemory: see Call.DownstreamKeyMemory.
	DownstreamKeyMemory time.Duration
	// DownstreamSettleTime: see Call.DownstreamSettleTime. For a compensation, give the forward
	// step's downstream's: ForwardSettled waits it out.
	DownstreamSettleTime time.Duration
	// Reconcile: see Call.Reconcile.
	Reconcile ReconcileFunc
}

// Do runs fn at most once per c.Key and returns its result, or the result recorded by an
// earlier execution of the same intent (DESIGN.md at the module's root, external effect path):
//
//   - first execution: reserves the key, calls fn with the key's token in its context
//     (keys.TokenFrom), records the outcome; 2 round trips;
//   - a finished receipt: returns the recorded result or non-retryable error without calling
//     fn; 1 round trip;
//   - another attempt holds a live lease: InProgressError (retry after its RetryAfter);
//   - the holder's lease ended: takes over and calls fn again with the same token, or, for a
//     downstream that does not deduplicate, reconciles or fails with OutcomeUnknownError;
//   - the same key with another fingerprint: MismatchError, and fn is not called.
//
// fn's non-retryable application errors are recorded and replayed; its other errors release the
// lease so the next attempt takes over at once. The errors Do returns are Temporal application
// errors with the ErrType constants as types, wrapping the typed errors of this package.
func Do[T any](ctx context.Context, s *Store, c Call, fn func(context.Context) (T, error)) (T, error) {
	p, err := s.do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
		out, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return s.encode(c.Key, out)
	})
	return decode[T](s, p, err)
}

// DoTx runs fn in a transaction that also writes the receipt, so the local mutation and its
// receipt commit together or not at all: exactly once for the local effect. fn must not commit
// or roll back tx. A finished receipt is replayed without calling fn; a concurrent duplicate
// waits on the receipt's unique index and then replays; an error from fn rolls back its writes
// (non-retryable errors are then recorded and replayed). If the reply to COMMIT is lost, DoTx
// returns a retryable StoreError and the next attempt finds out whether it committed.
//
// A key must not be used both with Do and DoTx.
func DoTx[T any](ctx context.Context, s *Store, c Call, fn func(context.Context, pgx.Tx) (T, error)) (T, error) {
	p, err := s.doTx(ctx, c, func(ctx context.Context, tx pgx.Tx) (*commonpb.Payload, error) {
		out, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return s.encode(c.Key, out)
	})
	return decode[T](s, p, err)
}

// Wrap returns fn as an activity whose effect happens once per intent: each execution derives
// the key from the activity's context (opts.Keys, ScopeWorkflow by default), fingerprints in, and
// runs fn under Do. Register the result under a stable name:
//
//	w.RegisterActivityWithOptions(activity.Wrap(store, Charge, nil), sdkactivity.RegisterOptions{Name: "Charge"})
//
// ScopeWorkflow needs the interceptor on the worker (NewInterceptor with no activities selected
// is enough), which also extends the lease on heartbeats. When the interceptor already applies
// a receipt to this activity, Wrap calls fn directly instead of reserving the key twice.
func Wrap[In, Out any](s *Store, fn func(context.Context, In) (Out, error), opts *Options) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		if leaseFrom(ctx) != nil {
			return fn(ctx, in)
		}
		c, err := s.callFor(ctx, opts, []any{in})
		if err != nil {
			var zero Out
			return zero, toTemporal(err)
		}
		return Do(ctx, s, c, func(ctx context.Context) (Out, error) { return fn(ctx, in) })
	}
}

// WrapTx returns fn as an activity whose local mutation commits together with its receipt (see
// DoTx), keyed like Wrap.
func WrapTx[In, Out any](s *Store, fn func(context.Context, pgx.Tx, In) (Out, error), opts *Options) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		c, err := s.callFor(ctx, opts, []any{in})
		if err != nil {
			var zero Out
			return zero, toTemporal(err)
		}
		return DoTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (Out, error) { return fn(ctx, tx, in) })
	}
}

// callFor builds the Call for the activity running in ctx.
func (s *Store) callFor(ctx context.Context, opts *Options, args []any) (Call, error) {
	if !sdkactivity.IsActivity(ctx) {
		return Call{}, errors.New("tempotent: a wrapped activity was called outside an activity context; call Do or DoTx with a Call instead")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	k, err := keys.FromActivity(ctx, o.Keys)
	if err != nil {
		return Call{}, err
	}
	fp, err := keys.FingerprintOf(args)
	if err != nil {
		return Call{}, err
	}
	return Call{
		Key:                    k,
		Fingerprint:            fp,
		ScheduledAt:            sdkactivity.GetInfo(ctx).ScheduledTime,
		DownstreamDeduplicates: o.DownstreamDeduplicates,
		DownstreamKeyMemory:    o.DownstreamKeyMemory,
		DownstreamSettleTime:   o.DownstreamSettleTime,
		Reconcile:              o.Reconcile,
	}, nil
}

func decode[T any](s *Store, p *commonpb.Payload, err error) (T, error) {
	var out T
	if err != nil {
		return out, toTemporal(err)
	}
	if p != nil {
		if err := s.cfg.DataConverter.FromPayload(p, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}
