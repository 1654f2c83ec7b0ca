package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// A setting that cannot work is refused when the handler is built, with the field to fix: here a
// retention that would forget a delivery ID while a replay of the delivery is still within the
// signature's tolerance, and a body limit the outbox would refuse to store.
func ExampleConfigError() {
	ctx := context.Background()
	_, pool, cleanup := exampleOutbox(ctx, "example_webhook_config")
	defer cleanup()
	out, err := outbox.New(pool, &outbox.Config{Schema: "example_webhook_config", MaxPayloadBytes: 64 << 10})
	if err != nil {
		panic(err)
	}
	stripe := webhook.Stripe{Secrets: []string{"whsec_example_0123456789"}, Tolerance: time.Hour}

	for _, cfg := range []webhook.HandlerConfig{
		{Source: "stripe", Verifier: stripe, Retention: time.Hour},
		{Source: "stripe", Verifier: stripe, MaxBodyBytes: 1 << 20},
	} {
		_, err := webhook.NewHandler(pool, out, cfg)
		var ce *webhook.ConfigError
		if errors.As(err, &ce) {
			fmt.Println(ce.Field)
		}
	}
	// Output:
	// HandlerConfig.Retention
	// HandlerConfig.MaxBodyBytes
}
