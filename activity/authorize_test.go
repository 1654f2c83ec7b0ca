package activity_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

// acl stands for an authorization service: the tenants that may act, granted and revoked while
// intents are in flight. Its hook counts the questions it was asked.
type acl struct {
	mu      sync.Mutex
	allowed map[string]bool
	asked   atomic.Int32
}

func newACL(tenants ...string) *acl {
	a := &acl{allowed: map[string]bool{}}
	for _, t := range tenants {
		a.grant(t)
	}
	return a
}

func (a *acl) grant(tenant string)  { a.set(tenant, true) }
func (a *acl) revoke(tenant string) { a.set(tenant, false) }

func (a *acl) set(tenant string, allowed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allowed[tenant] = allowed
}

func (a *acl) hook(_ context.Context, _ keys.Key, tenant string) (bool, error) {
	a.asked.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allowed[tenant], nil
}

// receiptRows is every receipt of schema, each row as JSON, in key order: equal snapshots mean
// nothing was written.
func receiptRows(t *testing.T, schema string) string {
	t.Helper()
	var rows string
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT coalesce(string_agg(row_to_json(r)::text, E'\\n' ORDER BY r.operation, r.id), '') FROM "+pgx.Identifier{schema, "receipts"}.Sanitize()+" r").Scan(&rows))
	return rows
}

// requireRefused fails t unless err is the non-retryable refusal of tenant, and says nothing of
// the result that secret stands for.
func requireRefused(t *testing.T, err error, secret string, msgAndArgs ...any) {
	t.Helper()
	appErr := temporaltest.RequireAppError(t, err, activity.ErrTypeUnauthorized, false, msgAndArgs...)
	require.Contains(t, appErr.Error(), "not authorized", msgAndArgs...)
	if secret != "" {
		require.NotContains(t, err.Error(), secret, msgAndArgs...)
	}
}

// authzPath runs one attempt of the intent "order-1" under the caller's tenant on one of the
// paths a call can take, with the hooks given, and returns what it handed back.
type authzPath struct {
	name string
	run  func(t *testing.T, s *activity.Store, tenant string, hook activity.Options, fn func(context.Context) (string, error)) (string, error)
}

// tenantActivityEnv is newActivityEnv whose activities run under tenant, as the tenant
// propagator would carry it from the workflow.
func tenantActivityEnv(tenant string) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{
		Interceptors:              []interceptor.WorkerInterceptor{activity.NewInterceptor()},
		BackgroundActivityContext: keys.WithTenant(keys.Given(context.Background(), "charge", "order-1"), tenant),
	})
	return env
}

func executeString(t *testing.T, env *testsuite.TestActivityEnvironment, name string, arg any) (string, error) {
	t.Helper()
	val, err := env.ExecuteActivity(name, arg)
	if err != nil {
		return "", err
	}
	var out string
	require.NoError(t, val.Get(&out))
	return out, nil
}

var authzPaths = []authzPath{
	{"Do", func(t *testing.T, s *activity.Store, tenant string, o activity.Options, fn func(context.Context) (string, error)) (string, error) {
		c := call(t, "order-1", ChargeRequest{Order: "order-1"})
		c.Authorize = o.Authorize
		return activity.Do(keys.WithTenant(context.Background(), tenant), s, c, fn)
	}},
	{"DoInNewTx", func(t *testing.T, s *activity.Store, tenant string, o activity.Options, fn func(context.Context) (string, error)) (string, error) {
		c := call(t, "order-1", ChargeRequest{Order: "order-1"})
		c.Authorize = o.Authorize
		return activity.DoInNewTx(keys.WithTenant(context.Background(), tenant), s, c, func(ctx context.Context, _ pgx.Tx) (string, error) { return fn(ctx) })
	}},
	{"DoInTx", func(t *testing.T, s *activity.Store, tenant string, o activity.Options, fn func(context.Context) (string, error)) (string, error) {
		c := call(t, "order-1", ChargeRequest{Order: "order-1"})
		c.Authorize = o.Authorize
		ctx := keys.WithTenant(context.Background(), tenant)
		tx, err := pgtest.Pool(t).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		out, err := activity.DoInTx(ctx, s, tx, c, func(ctx context.Context, _ pgx.Tx) (string, error) { return fn(ctx) })
		if err != nil {
			return out, err
		}
		return out, tx.Commit(ctx)
	}},
	{"Register", func(t *testing.T, s *activity.Store, tenant string, o activity.Options, fn func(context.Context) (string, error)) (string, error) {
		env := tenantActivityEnv(tenant)
		require.NoError(t, activity.Register(env, s, "Charge", func(ctx context.Context, _ ChargeRequest) (string, error) { return fn(ctx) }, o))
		return executeString(t, env, "Charge", ChargeRequest{Order: "order-1"})
	}},
	{"RegisterTx", func(t *testing.T, s *activity.Store, tenant string, o activity.Options, fn func(context.Context) (string, error)) (string, error) {
		env := tenantActivityEnv(tenant)
		require.NoError(t, activity.RegisterTx(env, s, "Charge", func(ctx context.Context, _ pgx.Tx, _ ChargeRequest) (string, error) { return fn(ctx) }, o))
		return executeString(t, env, "Charge", ChargeRequest{Order: "order-1"})
	}},
	{"ForEachItem", func(t *testing.T, s *activity.Store, tenant string, o activity.Options, fn func(context.Context) (string, error)) (string, error) {
		env := tenantActivityEnv(tenant)
		env.RegisterActivityWithOptions(func(ctx context.Context, items []string) (string, error) {
			results, err := activity.ForEach(ctx, s, items, activity.Items[string]{ID: func(s string) string { return s }, Operation: "Charge",
				Options: activity.Options{DownstreamDeduplicates: true, Authorize: o.Authorize}},
				func(ctx context.Context, _ string) (string, error) { return fn(ctx) })
			if err != nil {
				return "", err
			}
			return results[0].Out, results[0].Err
		}, sdkactivity.RegisterOptions{Name: "Batch"})
		return executeString(t, env, "Batch", []string{"order-1"})
	}},
}

// TestAuthorizeOnEveryPath: on each path, the store's hook is asked before a first run (a refusal
// calls nothing and reserves nothing) and before a replay (a tenant revoked since the first run
// is handed nothing, and the receipt is left as it was).
func TestAuthorizeOnEveryPath(t *testing.T) {
	t.Parallel()
	for _, path := range authzPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			access := newACL()
			s, schema := setup(t, &activity.Config{Authorize: access.hook})
			var calls atomic.Int32
			charge := func(ctx context.Context) (string, error) {
				calls.Add(1)
				return "ch_secret_result", nil
			}

			_, err := path.run(t, s, "acme", activity.Options{}, charge)
			requireRefused(t, err, "", "refused first run")
			require.Zero(t, calls.Load(), "a refused first run called the function")
			require.Empty(t, receiptRows(t, schema), "a refused first run left a receipt")

			access.grant("acme")
			out, err := path.run(t, s, "acme", activity.Options{}, charge)
			require.NoError(t, err)
			require.Equal(t, "ch_secret_result", out)
			recorded := receiptRows(t, schema)
			require.NotEmpty(t, recorded)

			access.revoke("acme")
			out, err = path.run(t, s, "acme", activity.Options{}, charge)
			requireRefused(t, err, "ch_secret_result", "refused replay")
			require.Empty(t, out, "a refused replay handed back the result")
			require.Equal(t, recorded, receiptRows(t, schema), "a refused replay changed the receipt")
			require.Equal(t, int32(1), calls.Load())
			require.Equal(t, int32(3), access.asked.Load(), "the hook was not asked once per attempt")
		})
	}
}

// TestAuthorizePrecedence: the activity's hook (Options.Authorize, Call.Authorize; for ForEach's
// items, Items.Options.Authorize) is asked instead of the store's, both ways.
func TestAuthorizePrecedence(t *testing.T) {
	t.Parallel()
	for _, path := range authzPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			store, activityHook := newACL(), newACL("acme")
			s, schema := setup(t, &activity.Config{Authorize: store.hook})
			charge := func(context.Context) (string, error) { return "ch_1", nil }

			out, err := path.run(t, s, "acme", activity.Options{Authorize: activityHook.hook}, charge)
			require.NoError(t, err, "the store's refusal overrode the activity's hook")
			require.Equal(t, "ch_1", out)
			require.Zero(t, store.asked.Load(), "the store's hook was asked although the activity has its own")

			store.grant("acme")
			activityHook.revoke("acme")
			_, err = path.run(t, s, "acme", activity.Options{Authorize: activityHook.hook}, charge)
			requireRefused(t, err, "ch_1", "the store's grant overrode the activity's refusal")
			require.Zero(t, store.asked.Load())
			require.NotEmpty(t, receiptRows(t, schema))
		})
	}
}

// TestForEachItemsInheritTheBatchActivitysHook: items without a hook of their own are asked the
// hook of the batch activity they run under, not the store's.
func TestForEachItemsInheritTheBatchActivitysHook(t *testing.T) {
	t.Parallel()
	store, batch := newACL(), newACL("acme")
	s, schema := setup(t, &activity.Config{Authorize: store.hook})
	p := newPayouts()
	payees := payeesN(3)
	env := tenantActivityEnv("acme")
	require.NoError(t, activity.Register(env, s, "PayOut", payOut(s, p, 1), activity.Options{Batch: true, Authorize: batch.hook}))
	_, err := executePayOut(t, env, payees)
	require.NoError(t, err)
	p.requireEachPaidOnce(t, payees)
	require.Zero(t, store.asked.Load(), "the items were asked the store's hook")
	require.Equal(t, int32(1+len(payees)), batch.asked.Load(), "the batch and each item ask the batch's hook once")
	require.Equal(t, 1+len(payees), countReceipts(t, schema))
}

// TestAuthorizeHookFailureIsRetryable: a hook that cannot tell (an error, even a non-retryable
// one; a panic; a context that ended while it waited) fails the attempt with a retryable error,
// calls nothing and writes nothing; the next attempt asks again.
func TestAuthorizeHookFailureIsRetryable(t *testing.T) {
	t.Parallel()
	hooks := map[string]func(ctx context.Context, cancel context.CancelFunc) (bool, error){
		"Error": func(context.Context, context.CancelFunc) (bool, error) {
			return false, errors.New("authorization service unavailable")
		},
		"NonRetryableError": func(context.Context, context.CancelFunc) (bool, error) {
			return false, temporal.NewNonRetryableApplicationError("authorization service says no", "AuthzDown", nil)
		},
		"Panic": func(context.Context, context.CancelFunc) (bool, error) { panic("nil map in the hook") },
		"ContextEnded": func(ctx context.Context, cancel context.CancelFunc) (bool, error) {
			cancel() // the activity's deadline passes while the hook waits on its service
			<-ctx.Done()
			return true, ctx.Err()
		},
	}
	for name, hook := range hooks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var failing atomic.Bool
			failing.Store(true)
			ctx, cancel := context.WithCancel(keys.WithTenant(context.Background(), "acme"))
			defer cancel()
			s, schema := setup(t, &activity.Config{Authorize: func(ctx context.Context, _ keys.Key, _ string) (bool, error) {
				if failing.Load() {
					return hook(ctx, cancel)
				}
				return true, nil
			}})
			var calls atomic.Int32
			charge := func(context.Context) (string, error) { calls.Add(1); return "ch_1", nil }
			c := call(t, "order-1", ChargeRequest{Order: "order-1"})

			_, err := activity.Do(ctx, s, c, charge)
			temporaltest.RequireAppError(t, err, "tempotent.AuthorizeFailed", true)
			require.ErrorContains(t, err, "the authorization hook failed")
			require.Zero(t, calls.Load())
			require.Empty(t, receiptRows(t, schema))

			failing.Store(false)
			out, err := activity.Do(keys.WithTenant(context.Background(), "acme"), s, c, charge)
			require.NoError(t, err)
			require.Equal(t, "ch_1", out)
		})
	}
}

// TestNoHookNoCheck: without a hook every caller runs and replays, as before hooks existed.
func TestNoHookNoCheck(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	c := call(t, "order-1", ChargeRequest{Order: "order-1"})
	for range 2 {
		out, err := activity.Do(context.Background(), s, c, func(context.Context) (string, error) { return "ch_1", nil })
		require.NoError(t, err)
		require.Equal(t, "ch_1", out)
	}
}
