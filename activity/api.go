package activity

import (
	"context"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/engine"
)

// Do runs fn at most once per c.Key and returns its result, or the result recorded by an
// earlier execution of the same intent (DESIGN.md at the module's root, external effect path). It
// is the primitive for code outside Temporal; in a Temporal worker, Register an activity instead.
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
	p, err := s.eng.Do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
		out, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return s.eng.Encode(c.Key, out)
	})
	return decode[T](s, p, err)
}

// DoInNewTx opens a transaction, runs fn in it and writes the receipt in it, so the local
// mutation and its receipt commit together or not at all: exactly once for the local effect. fn
// must not commit or roll back tx. A finished receipt is replayed without calling fn; a
// concurrent duplicate waits on the receipt's unique index and then replays; an error from fn
// rolls back its writes (non-retryable errors are then recorded and replayed). If the reply to
// COMMIT is lost, DoInNewTx returns a retryable StoreError and the next attempt finds out whether
// it committed. To write the receipt in a transaction of your own, use DoInTx.
//
// A key must not be used both with Do and a transactional form.
func DoInNewTx[T any](ctx context.Context, s *Store, c Call, fn func(context.Context, pgx.Tx) (T, error)) (T, error) {
	p, err := s.eng.DoInNewTx(ctx, c, func(ctx context.Context, tx pgx.Tx) (*commonpb.Payload, error) {
		out, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return s.eng.Encode(c.Key, out)
	})
	return decode[T](s, p, err)
}

// DoInTx runs fn in tx, the caller's own transaction, and writes the receipt in it: the receipt
// commits exactly when the caller commits tx, together with everything else the caller wrote.
// The caller begins, commits and rolls back tx; DoInTx works inside a savepoint, so fn's writes
// and the receipt are undone alone when fn fails, and tx stays usable.
//
//   - a finished receipt (committed by an earlier transaction) is replayed without calling fn;
//   - a concurrent transaction holding the same key makes the receipt's INSERT wait until it
//     ends, then DoInTx replays its receipt (READ COMMITTED), or fails with a retryable
//     InProgressError when tx's snapshot cannot see it (REPEATABLE READ and SERIALIZABLE): roll
//     tx back and retry;
//   - a non-retryable error of fn is recorded in tx (so it is replayed once tx commits); any
//     other error of fn leaves no receipt.
//
// The Store's lock and statement timeouts do not apply: tx's own settings do.
func DoInTx[T any](ctx context.Context, s *Store, tx pgx.Tx, c Call, fn func(context.Context, pgx.Tx) (T, error)) (T, error) {
	p, err := s.eng.DoInTx(ctx, tx, c, func(ctx context.Context, tx pgx.Tx) (*commonpb.Payload, error) {
		out, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return s.eng.Encode(c.Key, out)
	})
	return decode[T](s, p, err)
}

func decode[T any](s *Store, p *commonpb.Payload, err error) (T, error) {
	var out T
	if err != nil {
		return out, engine.ToTemporal(err)
	}
	if p != nil {
		if err := s.cfg.DataConverter.FromPayload(p, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}
