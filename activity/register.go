package activity

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/internal/engine"
	"github.com/tempotent/tempotent/keys"
)

// Register registers fn on w as the activity named name, whose effect happens once per intent:
// each execution takes its key from the workflow that scheduled it (keys.FromActivity),
// fingerprints in, and runs fn under Do, with the guarantees opts declares for its downstream.
// Its result is stored with the Store's DataConverter and replayed to every later attempt.
//
//	err := activity.Register(w, store, "Charge", payments.Charge, activity.Options{DownstreamDeduplicates: true})
//
// Register is the one way to put receipts on a Temporal activity: name the activity once, here.
// The worker must have NewInterceptor installed; an activity that runs without it fails with a
// non-retryable ErrTypeMisconfigured error before anything is written. Register returns an error,
// and registers nothing, for a name that is empty or not a valid key operation, a name already
// registered on w (through this Store, another Store or by hand), or invalid options.
func Register[In, Out any](w worker.ActivityRegistry, s *Store, name string, fn func(context.Context, In) (Out, error), opts Options) error {
	if fn == nil {
		return fmt.Errorf("activity.Register %q: fn is nil", name)
	}
	return s.register(w, name, opts, func(ctx context.Context, in In) (Out, error) {
		c, err := engine.CallFor(ctx, opts, in)
		if err != nil {
			var zero Out
			return zero, engine.ToTemporal(err)
		}
		return Do(ctx, s, c, func(ctx context.Context) (Out, error) { return fn(ctx, in) })
	})
}

// RegisterTx registers fn on w as the activity named name, whose local mutation commits together
// with its receipt (see DoInNewTx): fn writes through tx, and must not commit or roll it back.
// Otherwise it is Register.
func RegisterTx[In, Out any](w worker.ActivityRegistry, s *Store, name string, fn func(context.Context, pgx.Tx, In) (Out, error), opts Options) error {
	if fn == nil {
		return fmt.Errorf("activity.RegisterTx %q: fn is nil", name)
	}
	return s.register(w, name, opts, func(ctx context.Context, in In) (Out, error) {
		c, err := engine.CallFor(ctx, opts, in)
		if err != nil {
			var zero Out
			return zero, engine.ToTemporal(err)
		}
		return DoInNewTx(ctx, s, c, func(ctx context.Context, tx pgx.Tx) (Out, error) { return fn(ctx, tx, in) })
	})
}

// registrations remembers the names registered through a Store on each registry, so that a
// second registration of a name is refused with an error rather than a panic from the SDK.
type registrations struct {
	mu    sync.Mutex
	names map[worker.ActivityRegistry]map[string]bool
}

func (s *Store) register(w worker.ActivityRegistry, name string, opts Options, wrapped any) error {
	switch {
	case s == nil:
		return fmt.Errorf("activity.Register %q: the Store is nil", name)
	case w == nil:
		return fmt.Errorf("activity.Register %q: the worker is nil", name)
	}
	if err := (keys.Key{Namespace: "-", Operation: name, ID: "-"}).Validate(); err != nil {
		return fmt.Errorf("activity.Register %q: the name is the activity type and the default key operation: %w", name, err)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("activity.Register %q: %w", name, err)
	}
	r := &s.registered
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[w][name] {
		return fmt.Errorf("activity.Register %q: already registered on this worker; register each activity once", name)
	}
	if err := registerOn(w, name, wrapped); err != nil {
		return err
	}
	if r.names == nil {
		r.names = make(map[worker.ActivityRegistry]map[string]bool)
	}
	if r.names[w] == nil {
		r.names[w] = make(map[string]bool)
	}
	r.names[w][name] = true
	return nil
}

// registerOn registers wrapped under name, turning the SDK's panic on a name that w already holds
// (an activity registered by hand, or through another Store) into an error.
func registerOn(w worker.ActivityRegistry, name string, wrapped any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("activity.Register %q: %v; register each activity once", name, p)
		}
	}()
	w.RegisterActivityWithOptions(wrapped, sdkactivity.RegisterOptions{Name: name})
	return nil
}
