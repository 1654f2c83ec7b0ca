package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/outbox"
)

// A receiver that is down is not called for every message of the backlog: the publisher keeps one
// Transport, and so one breaker per host, across its publishes, even when it was given no Client.
// The messages it refuses to send fail retryably, to be sent once the receiver is back.
func TestHTTPPublisherBreaksTheCircuitAcrossPublishes(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	pub := &outbox.HTTPPublisher{URL: srv.URL, Breaker: downstream.BreakerConfig{Enabled: true, Failures: 2}}
	for i := range 5 {
		d := outbox.Delivery{Message: outbox.Message{ID: "m" + string(rune('a'+i)), Topic: "t", Payload: []byte("{}")}, Attempt: 1}
		err := pub.Publish(context.Background(), d)
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err), "a receiver that is down parked message %d as dead", i)
		if i >= 2 {
			var open *downstream.CircuitOpenError
			require.ErrorAs(t, err, &open, "publish %d was sent to a receiver whose circuit is open", i)
		}
	}
	require.Equal(t, int32(2), hits.Load(), "the receiver was called past the breaker's threshold")

	disabled := &outbox.HTTPPublisher{URL: srv.URL, Breaker: downstream.BreakerConfig{}}
	for range 3 {
		require.Error(t, disabled.Publish(context.Background(), outbox.Delivery{Message: outbox.Message{ID: "x", Topic: "t"}, Attempt: 1}))
	}
	require.Equal(t, int32(5), hits.Load(), "a publisher without Breaker.Enabled refused to call the receiver")
}

// A breaker setting that cannot work is refused like any other, naming the field.
func TestHTTPPublisherRefusesABadBreaker(t *testing.T) {
	t.Parallel()
	pub := &outbox.HTTPPublisher{URL: "http://127.0.0.1:1/", Breaker: downstream.BreakerConfig{Enabled: true, Failures: -1}}
	err := pub.Validate()
	var cfg *outbox.ConfigError
	require.ErrorAs(t, err, &cfg)
	require.Equal(t, "HTTPPublisher.Breaker", cfg.Field)
	require.True(t, outbox.IsPermanent(pub.Publish(context.Background(), outbox.Delivery{Message: outbox.Message{ID: "x", Topic: "t"}, Attempt: 1})))
}
