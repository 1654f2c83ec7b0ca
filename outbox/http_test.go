package outbox_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/outbox"
)

// A receiver that answers with a redirect did not receive the message: net/http would follow a
// 301, 302 or 303 as a GET without the body, and a 2xx to that GET is not a delivery. Only a
// 2xx to the POST delivers; a redirect is a failed attempt whose error says where it pointed.
func TestHTTPPublisherRedirectIsNotDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	var mu sync.Mutex
	var moved []string // requests that reached the redirect's target
	mux := http.NewServeMux()
	mux.HandleFunc("/moved/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		moved = append(moved, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/events/", func(w http.ResponseWriter, r *http.Request) {
		var code int
		_, _ = fmt.Sscan(r.URL.Path[len("/events/"):], &code)
		http.Redirect(w, r, "/moved/"+r.URL.Path[len("/events/"):], code)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	codes := []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}
	for _, code := range codes {
		put(t, ctx, o, outbox.Message{ID: fmt.Sprint("m", code), Topic: fmt.Sprint(code), Payload: []byte("body")})
	}
	pub := &outbox.HTTPPublisher{Route: func(d outbox.Delivery) (string, error) { return srv.URL + "/events/" + d.Topic, nil }}
	d := newDispatcher(t, o, pub, outbox.DispatcherConfig{})
	_, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	for _, code := range codes {
		r := rowOf(t, name, fmt.Sprint("m", code))
		require.Equal(t, "pending", r.State, "a %d redirect was marked delivered", code)
		require.Contains(t, r.Error, fmt.Sprint(code), "the error does not give the status")
		require.Contains(t, r.Error, fmt.Sprintf("/moved/%d", code), "the error does not say where the redirect pointed")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, moved, "the publisher followed a redirect")
}

// The error stored with a message refused by its receiver says what the receiver answered once,
// readably: not the downstream error a second time as the cause of the Temporal error wrapping it.
func TestHTTPPublisherStoresTheRefusalOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"error":"unknown field"}`))
	}))
	defer srv.Close()
	put(t, ctx, o, outbox.Message{ID: "m1", Topic: "t", Payload: []byte("{}")})
	d := newDispatcher(t, o, &outbox.HTTPPublisher{URL: srv.URL}, outbox.DispatcherConfig{})
	_, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	r := rowOf(t, name, "m1")
	require.Equal(t, "dead", r.State)
	require.Equal(t, 1, strings.Count(r.Error, "rejected with 422: "), "stored error: %s", r.Error)
	require.Contains(t, r.Error, "unknown field")
}
