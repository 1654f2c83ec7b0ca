package downstream_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Transport puts the running intent's token on every unsafe request, and refuses to send one
// without a key: a charge that went out with a fresh random key on each retry is exactly the
// double charge tempotent exists to prevent.
func ExampleTransport() {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("provider got Idempotency-Key:", r.Header.Get("Idempotency-Key"))
	}))
	defer provider.Close()
	client := &http.Client{Transport: &downstream.Transport{}}

	// Inside a registered activity, the context already carries its token.
	k, _ := keys.Explicit("default", "", "charge", "order-123")
	ctx := keys.WithToken(context.Background(), k.Token())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL+"/v1/charges", nil)
	resp, err := client.Do(req)
	fmt.Println(downstream.Check(req, resp, err))

	req, _ = http.NewRequestWithContext(context.Background(), http.MethodPost, provider.URL+"/v1/charges", nil)
	resp, err = client.Do(req)
	err = downstream.Check(req, resp, err)
	var appErr *temporal.ApplicationError
	fmt.Println(errors.As(err, &appErr), appErr.Type(), appErr.NonRetryable())
	// Output:
	// provider got Idempotency-Key: Wezt7Jtd06om7yY8LJdjYo7FJf_uIhQHMgrZNPX4Is8
	// <nil>
	// true tempotent.DownstreamNoKey true
}

// Check turns an HTTP outcome into the Temporal error an activity returns: retryable with the
// same key when the provider may yet answer (5xx, 429 with its Retry-After as the next retry
// delay), non-retryable when it said no, so that the receipt records and replays the refusal.
func ExampleCheck() {
	answers := map[string]func(http.ResponseWriter){
		"/busy": func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		"/declined": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusPaymentRequired)
			fmt.Fprint(w, `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined."}}`)
		},
	}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answers[r.URL.Path](w) }))
	defer provider.Close()

	for _, path := range []string{"/busy", "/declined"} {
		req, _ := http.NewRequest(http.MethodGet, provider.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		var appErr *temporal.ApplicationError
		if errors.As(downstream.Check(req, resp, err), &appErr) {
			e, _ := downstream.As(appErr)
			fmt.Println(path, appErr.Type(), "retryable:", !appErr.NonRetryable(), "next retry:", appErr.NextRetryDelay(), "code:", cmp.Or(e.Code, "-"))
		}
	}
	// Output:
	// /busy tempotent.DownstreamRateLimited retryable: true next retry: 3s code: -
	// /declined tempotent.DownstreamRejected retryable: false next retry: 0s code: card_declined
}

// A reconcile function for any HTTP API that can be searched by the idempotency key: found is
// the effect made under the token, as the activity would have returned it; "not found" lets the
// next attempt call again (once the settle time has passed); any other answer is an error, which
// leaves the outcome unknown and the attempt retries. Give it as activity.Options.Reconcile.
func Example_reconcileAnyHTTPAPI() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("idempotency_key") == "known-token" {
			fmt.Fprint(w, `{"id":"bk_1","status":"confirmed"}`)
			return
		}
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
	}))
	defer api.Close()

	type booking struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	reconcile := func(ctx context.Context, token keys.Token) (any, bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.URL+"/v1/bookings?idempotency_key="+url.QueryEscape(token.String()), nil)
		if err != nil {
			return nil, false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, false, err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			var b booking
			return b, true, json.NewDecoder(resp.Body).Decode(&b)
		case http.StatusNotFound:
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("booking lookup answered %s", resp.Status)
	}
	// activity.Register(w, store, "Book", book, activity.Options{Reconcile: reconcile})

	fmt.Println(reconcile(context.Background(), "known-token"))
	fmt.Println(reconcile(context.Background(), "other-token"))
	// Output:
	// {bk_1 confirmed} true <nil>
	// <nil> false <nil>
}
