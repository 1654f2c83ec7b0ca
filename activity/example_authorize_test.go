package activity_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// Authorization at first run and at replay: the store asks its hook before every attempt, so a
// tenant revoked after the first run is refused the recorded result instead of being handed it.
func ExampleDo_authorize() {
	ctx := context.Background()
	_, pool, cleanup := exampleStore(ctx, "example_authorize")
	defer cleanup()

	var (
		mu      sync.Mutex
		revoked = map[string]bool{}
	)
	store, err := activity.NewStore(pool, &activity.Config{
		Schema: "example_authorize",
		// The caller's tenant comes from its context (keys.WithTenant; in a worker,
		// keys.TenantPropagator). A real hook asks your authorization service, under ctx.
		Authorize: func(ctx context.Context, k keys.Key, tenant string) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return tenant == k.Tenant && !revoked[tenant], nil
		},
	})
	if err != nil {
		panic(err)
	}
	c := activity.Call{Key: mustKey(keys.Explicit("default", "acme", "Charge", "order-123")), Request: 100}
	charge := func(context.Context) (string, error) { return "ch_1", nil }
	acme := keys.WithTenant(ctx, "acme")

	first, err := activity.Do(acme, store, c, charge)
	fmt.Println(first, err)

	_, err = activity.Do(keys.WithTenant(ctx, "globex"), store, c, charge) // another tenant, same key
	fmt.Println(errors.As(err, new(*activity.UnauthorizedError)))

	mu.Lock()
	revoked["acme"] = true
	mu.Unlock()
	again, err := activity.Do(acme, store, c, charge)
	var refused *activity.UnauthorizedError
	fmt.Printf("%q %v %s\n", again, errors.As(err, &refused), refused.Tenant)
	// Output:
	// ch_1 <nil>
	// true
	// "" true acme
}
