package downstream_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/internal/temporaltest"
)

// respond returns a response of status with body and header, as http.Client.Do would.
func respond(status int, body string, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: header}
}

func charges(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/charges", nil)
	require.NoError(t, err)
	return req
}

// Every 5xx, from 500 itself, is the provider's failure: retryable with the same key. A 4xx
// that is not one of the handled ones is a rejection.
func TestCheckTreatsEvery5xxAsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		wantType  string
		retryable bool
	}{
		{status: 499, wantType: downstream.ErrTypeRejected, retryable: false},
		{status: 500, wantType: downstream.ErrTypeUnavailable, retryable: true},
		{status: 503, wantType: downstream.ErrTypeUnavailable, retryable: true},
		{status: 599, wantType: downstream.ErrTypeUnavailable, retryable: true},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			err := downstream.Check(charges(t), respond(tc.status, "oops", nil), nil)
			temporaltest.RequireAppError(t, err, tc.wantType, tc.retryable)
		})
	}
}

// A body that is not a provider error in Stripe's shape becomes the Message as it is, up to 200
// bytes; a longer one is cut at 200 and marked with an ellipsis.
func TestCheckCutsALongMessageAt200Bytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
	}{
		{name: "Short", body: " bad gateway\n", want: "bad gateway"},
		{name: "AtTheLimit", body: strings.Repeat("x", 200), want: strings.Repeat("x", 200)},
		{name: "OneByteOver", body: strings.Repeat("x", 200) + "y", want: strings.Repeat("x", 200) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, ok := downstream.As(downstream.Check(charges(t), respond(502, tc.body, nil), nil))
			require.True(t, ok)
			require.Equal(t, tc.want, e.Message)
		})
	}
}

// Retry-After, in delay-seconds or as an HTTP date, becomes the next retry delay of a 429 or a
// 503; one in the past, negative, unreadable or too far off for a time.Duration is no delay.
func TestCheckReadsRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		value    string
		min, max time.Duration
	}{
		{name: "Seconds", value: "7", min: 7 * time.Second, max: 7 * time.Second},
		{name: "Zero", value: "0"},
		{name: "Negative", value: "-3"},
		{name: "Unreadable", value: "soon"},
		{name: "Fraction", value: "7.5"},
		{name: "SpacesAround", value: " 7 ", min: 7 * time.Second, max: 7 * time.Second},
		// Beyond what a time.Duration holds (292 years): ignored, not wrapped around.
		{name: "TooManySeconds", value: "9999999999999"},
		{name: "TooManyDigits", value: "99999999999999999999999"},
		{name: "HTTPDateTooFar", value: "Fri, 31 Dec 9999 23:59:59 GMT"},
		// An HTTP date has whole seconds: a minute from now is read as 59 to 60 s.
		{name: "HTTPDate", value: time.Now().Add(time.Minute).UTC().Format(http.TimeFormat), min: 58 * time.Second, max: time.Minute},
		{name: "HTTPDateInThePast", value: time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
				err := downstream.Check(charges(t), respond(status, "{}", http.Header{"Retry-After": {tc.value}}), nil)
				e, ok := downstream.As(err)
				require.True(t, ok)
				require.GreaterOrEqual(t, e.RetryAfter, tc.min, "Retry-After %q on %d", tc.value, status)
				require.LessOrEqual(t, e.RetryAfter, tc.max, "Retry-After %q on %d", tc.value, status)
				var appErr *temporal.ApplicationError
				require.ErrorAs(t, err, &appErr)
				require.Equal(t, e.RetryAfter, appErr.NextRetryDelay())
			}
		})
	}
}

// TestRetryAfterBeyondTheDeadlineIsNotWaitedFor: a Retry-After longer than the attempt has left
// does not hold the call: it returns at once, well before its deadline, with the delay as the
// next retry delay, so that Temporal schedules the next attempt after it.
func TestRetryAfterBeyondTheDeadlineIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(2 * time.Hour).UTC().Format(http.TimeFormat)
	for name, header := range map[string]string{"Seconds": "3600", "HTTPDate": later} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", header)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := &http.Client{Transport: &downstream.Transport{}}
			err := call(t, client, ctx, srv.URL)
			require.NoError(t, ctx.Err(), "the call waited for its deadline")
			appErr := temporaltest.RequireAppError(t, err, downstream.ErrTypeRateLimited, true)
			require.Greater(t, appErr.NextRetryDelay(), 59*time.Minute, "the delay goes to Temporal whole")
		})
	}
}
