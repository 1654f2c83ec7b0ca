package shard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/keys"
)

// Register is activity.Register with the store chosen per execution: the store of the shard of
// the key's tenant (Router.Store), asked before anything is reserved, run or replayed. While the
// tenant is being moved the execution fails with a retryable ErrTypeTenantMoving error, and
// with ErrTypeRoute when its shard cannot be known. Everything else — the key, the fingerprint,
// the replay, the errors — is activity.Register's. The worker must have activity.NewInterceptor
// installed. Register returns an error, and registers nothing, for a nil Router or fn, a name
// that is not a valid key operation, invalid options, or a name w already holds.
func Register[In, Out any](w worker.ActivityRegistry, r *Router, name string, fn func(context.Context, In) (Out, error), opts activity.Options) error {
	if fn == nil {
		return fmt.Errorf("shard.Register %q: fn is nil", name)
	}
	return register(w, r, name, opts, func(ctx context.Context, in In) (Out, error) {
		return routed(ctx, r, opts, in, func(s *activity.Store, c activity.Call) (Out, error) {
			return activity.Do(ctx, s, c, func(ctx context.Context) (Out, error) { return fn(ctx, in) })
		})
	})
}

// RegisterTx is activity.RegisterTx with the store chosen as Register chooses it: fn's writes
// commit with the receipt in the tenant's shard's database, so the tenant's business rows must
// be there too.
func RegisterTx[In, Out any](w worker.ActivityRegistry, r *Router, name string, fn func(context.Context, pgx.Tx, In) (Out, error), opts activity.Options) error {
	if fn == nil {
		return fmt.Errorf("shard.RegisterTx %q: fn is nil", name)
	}
	return register(w, r, name, opts, func(ctx context.Context, in In) (Out, error) {
		return routed(ctx, r, opts, in, func(s *activity.Store, c activity.Call) (Out, error) {
			return activity.DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (Out, error) { return fn(ctx, tx, in) })
		})
	})
}

// movedRetries is how many times one execution looks its tenant's route up again after a shard
// refused it as moved (a *MovedError): once is enough unless the tenant moves again meanwhile.
const movedRetries = 3

// routed runs do on the store of the tenant's shard. When the shard refuses the tenant as moved
// away (the Router's answer predates a move), nothing was written there: it forgets the answer and
// runs do again on the shard the directory names now, where the tenant's receipts were copied, so
// that the retry replays what the old shard recorded or reserves afresh, never both.
func routed[Out any](ctx context.Context, r *Router, opts activity.Options, in any, do func(*activity.Store, activity.Call) (Out, error)) (Out, error) {
	for try := 1; ; try++ {
		c, s, err := r.call(ctx, opts, in)
		if err != nil {
			var zero Out
			return zero, err
		}
		out, err := do(s, c)
		moved, ok := AsMoved(err, c.Key.Tenant)
		if !ok {
			return out, err
		}
		r.Forget(c.Key.Tenant)
		if try == movedRetries {
			return out, toTemporal(moved)
		}
	}
}

// call builds the execution's Call as activity.Register does and finds its tenant's store.
func (r *Router) call(ctx context.Context, opts activity.Options, in any) (activity.Call, *activity.Store, error) {
	c, err := engine.CallFor(ctx, opts, in)
	if err != nil {
		return c, nil, engine.ToTemporal(err)
	}
	s, err := r.Store(ctx, c.Key.Tenant)
	if err != nil {
		return c, nil, toTemporal(err)
	}
	return c, s, nil
}

func register(w worker.ActivityRegistry, r *Router, name string, opts activity.Options, wrapped any) (err error) {
	switch {
	case r == nil:
		return fmt.Errorf("shard.Register %q: the Router is nil", name)
	case w == nil:
		return fmt.Errorf("shard.Register %q: the worker is nil", name)
	}
	if err := (keys.Key{Namespace: "-", Operation: name, ID: "-"}).Validate(); err != nil {
		return fmt.Errorf("shard.Register %q: the name is the activity type and the default key operation: %w", name, err)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("shard.Register %q: %w", name, err)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("shard.Register %q: %v; register each activity once", name, p)
		}
	}()
	w.RegisterActivityWithOptions(wrapped, sdkactivity.RegisterOptions{Name: name})
	return nil
}
