// Authorization at first run and at replay: a receipt's key is not a bearer credential. Whoever
// holds a key could otherwise have the intent run under it, or be handed the result an earlier
// caller's run recorded; the hook decides, for every attempt, before either happens.

package engine

import (
	"context"
	"fmt"

	"github.com/tempotent/tempotent/keys"
)

// AuthorizeFunc is the authorization hook (Config.Authorize, Options.Authorize, Call.Authorize):
// may the caller, whose tenant is tenant, run the intent k or be handed what its receipt
// recorded? It returns true to allow; false to refuse, which fails the attempt with a
// non-retryable *UnauthorizedError and leaves the receipt untouched (a caller that is allowed
// later still runs or replays it); or an error when it cannot tell (its database or
// authorization service failed), which fails the attempt with a retryable error so that the
// next attempt asks again. A panic in it is such an error. It must honour ctx, whose deadline is
// the activity's.
//
// It is the type of those fields; write a func literal of this signature.
type AuthorizeFunc = func(ctx context.Context, k keys.Key, tenant string) (allowed bool, err error)

// UnauthorizedError refuses an attempt that the authorization hook did not allow: the caller's
// Tenant may neither run the intent Key nor be handed its recorded result. Nothing was called,
// reserved, recorded or returned, and a receipt already there is left as it was. It is
// non-retryable: grant the tenant access and start the activity again (a new attempt asks the
// hook again), or run the intent under a tenant that may.
type UnauthorizedError struct {
	Key keys.Key
	// Tenant is the caller's tenant (keys.TenantFrom of the attempt's context), "" for none.
	Tenant string
}

func (e *UnauthorizedError) Error() string {
	return fmt.Sprintf("%s: the caller's tenant %q is not authorized for this intent, so nothing was called, recorded or returned; grant the tenant access, or run the intent under a tenant that has it",
		ref(e.Key), e.Tenant)
}

// authorizeFailed is the authorization hook's own failure (an error, or a panic): not knowing
// is not a refusal, so it is retryable whatever the hook returned, and ToTemporal gives it the
// type errtype.AuthorizeFailed.
type authorizeFailed struct {
	key keys.Key
	err error
}

func (e *authorizeFailed) Error() string {
	return fmt.Sprintf("authorize %s: the authorization hook failed: %v; nothing was called, recorded or returned, and the next attempt asks again", ref(e.key), e.err)
}

func (e *authorizeFailed) Unwrap() error { return e.err }

// authorize asks the hook that applies to c whether the caller in ctx may run c or have its
// recorded result: c.Authorize (the activity's, or the call's) when set, else the store's
// Config.Authorize. No hook allows everything. Every path calls it before its first receipt
// statement, so that a refusal leaves no receipt and hands back nothing.
func (s *Store) authorize(ctx context.Context, c Call) (err error) {
	hook := firstHook(c.Authorize, s.cfg.Authorize)
	if hook == nil {
		return nil
	}
	tenant := keys.TenantFrom(ctx)
	defer func() {
		if r := recover(); r != nil {
			err = &authorizeFailed{key: c.Key, err: fmt.Errorf("panic: %v", r)}
		}
	}()
	allowed, err := hook(ctx, c.Key, tenant)
	switch {
	case err != nil:
		return &authorizeFailed{key: c.Key, err: err}
	case !allowed:
		newObserver(ctx, s, c.Key).log("refused: the caller is not authorized", "tenant", tenant)
		return &UnauthorizedError{Key: c.Key, Tenant: tenant}
	}
	return nil
}

// firstHook is the first hook set, in order of precedence (the narrowest scope first), or nil.
func firstHook(hooks ...AuthorizeFunc) AuthorizeFunc {
	for _, h := range hooks {
		if h != nil {
			return h
		}
	}
	return nil
}
