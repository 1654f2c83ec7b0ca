package downstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// A Transport shared by every call to a provider stops calling it after Breaker.Failures
// failures in a row: the next calls are refused unsent, with a retryable error that tells
// Temporal when to try again.
func ExampleBreakerConfig() {
	calls := 0
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer provider.Close()
	client := &http.Client{Transport: &downstream.Transport{Breaker: downstream.BreakerConfig{Enabled: true, Failures: 2}}}

	k, _ := keys.Explicit("default", "", "charge", "order-123")
	ctx := keys.WithToken(context.Background(), k.Token())
	for range 4 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL+"/v1/charges", nil)
		resp, err := client.Do(req)
		err = downstream.Check(req, resp, err)
		var appErr *temporal.ApplicationError
		var open *downstream.CircuitOpenError
		errors.As(err, &appErr)
		fmt.Println(appErr.Type(), "retryable:", !appErr.NonRetryable(), "refused unsent:", errors.As(err, &open))
	}
	fmt.Println("calls the provider got:", calls)
	// Output:
	// tempotent.DownstreamUnavailable retryable: true refused unsent: false
	// tempotent.DownstreamUnavailable retryable: true refused unsent: false
	// tempotent.DownstreamCircuitOpen retryable: true refused unsent: true
	// tempotent.DownstreamCircuitOpen retryable: true refused unsent: true
	// calls the provider got: 2
}
