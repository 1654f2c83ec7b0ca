package outbox_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// received is one request as a test receiver saw it.
type received struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server that keeps every request and answers 200.
func receiver(t *testing.T) (*httptest.Server, func() []received) {
	t.Helper()
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, received{header: r.Header.Clone(), body: body})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), got...)
	}
}

// randomSecret is a whsec_ secret of 24 to 64 random bytes, as the specification asks.
func randomSecret(rng *rand.Rand) string {
	key := make([]byte, 24+rng.IntN(41))
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// randomID is a message ID a Standard Webhooks delivery can carry: printable, no '.'.
func randomID(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-/:\"=+ é€"
	runes := []rune(alphabet)
	var b strings.Builder
	for range 1 + rng.IntN(60) {
		b.WriteRune(runes[rng.IntN(len(runes))])
	}
	id := strings.TrimSpace(b.String()) // net/http trims a header value's outer spaces
	if id == "" {
		return "x"
	}
	return id
}

// Every message HTTPPublisher signs verifies under webhook.StandardWebhooks, the intake's own
// verifier, with each of the publisher's secrets; and a change of one byte of the body, the ID
// or the timestamp makes it fail. IDs, bodies, timestamps and secrets are random (the seed is
// logged).
func TestHTTPPublisherSignaturesVerifyProperty(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	srv, got := receiver(t)

	for i := range 200 {
		secrets := make([]string, 1+rng.IntN(3))
		for j := range secrets {
			secrets[j] = randomSecret(rng)
		}
		signedAt := time.Unix(rng.Int64N(253402300799), 0)
		body := make([]byte, rng.IntN(2048))
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		id := randomID(rng)
		pub := &outbox.HTTPPublisher{URL: srv.URL, SigningSecrets: secrets, Now: func() time.Time { return signedAt }}
		require.NoError(t, pub.Publish(context.Background(), outbox.Delivery{
			Message: outbox.Message{ID: id, Topic: "t", Payload: body}, Attempt: 1,
		}))
		all := got()
		require.Len(t, all, i+1)
		r := all[i]
		require.Equal(t, id, r.header.Get("webhook-id"))
		require.Len(t, strings.Fields(r.header.Get("webhook-signature")), len(secrets), "one signature per secret")

		for _, secret := range secrets {
			v := webhook.StandardWebhooks{Secrets: []string{secret}}
			d, err := v.Verify(r.header, r.body, signedAt)
			require.NoError(t, err, "case %d: a signed delivery did not verify", i)
			require.Equal(t, id, d.ID)
			require.Equal(t, signedAt.Unix(), d.Timestamp.Unix())
		}
		v := webhook.StandardWebhooks{Secrets: secrets}

		// One byte of the body changed (or one added, to an empty body).
		mutated := bytes.Clone(r.body)
		if len(mutated) == 0 {
			mutated = []byte{byte(rng.Uint32())}
		} else {
			mutated[rng.IntN(len(mutated))] ^= byte(1 + rng.IntN(255))
		}
		_, err := v.Verify(r.header, mutated, signedAt)
		require.ErrorIs(t, err, webhook.ErrSignature, "case %d: a changed body verified", i)

		// One byte of the ID changed; the verifier may also refuse it as malformed (a '.' or
		// invalid UTF-8), never accept it.
		h := r.header.Clone()
		idb := []byte(id)
		idb[rng.IntN(len(idb))] ^= byte(1 + rng.IntN(127))
		h.Set("webhook-id", string(idb))
		_, err = v.Verify(h, r.body, signedAt)
		require.Error(t, err, "case %d: a changed ID verified", i)
		require.True(t, errors.Is(err, webhook.ErrSignature) || errors.Is(err, webhook.ErrMalformed), "%v", err)

		// One digit of the timestamp changed to another digit: the verifier checks the
		// signature before freshness, so it refuses it as forged (or, past year 9999, as
		// malformed), never as merely stale.
		h = r.header.Clone()
		ts := []byte(h.Get("webhook-timestamp"))
		k := rng.IntN(len(ts))
		digit := ts[k]
		for digit == ts[k] || (k == 0 && digit == '0') {
			digit = byte('0' + rng.IntN(10))
		}
		ts[k] = digit
		h.Set("webhook-timestamp", string(ts))
		_, err = v.Verify(h, r.body, signedAt)
		require.Error(t, err, "case %d: a changed timestamp verified", i)
		require.True(t, errors.Is(err, webhook.ErrSignature) || errors.Is(err, webhook.ErrMalformed), "%v", err)
	}
}

// A message ID with '.' cannot be signed: "a.b" + "." + ts + "." + body is also the content of
// another split. The dispatcher parks it as dead, nothing sent, and says why.
func TestHTTPPublisherRefusesToSignAnIDWithADot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	srv, got := receiver(t)
	put(t, ctx, o, outbox.Message{ID: "order.42", Topic: "t", Payload: []byte("{}")}, outbox.Message{ID: "order-43", Topic: "t", Payload: []byte("{}")})
	pub := &outbox.HTTPPublisher{URL: srv.URL, SigningSecrets: []string{randomSecret(rand.New(rand.NewPCG(1, 2)))}}
	d := newDispatcher(t, o, pub, outbox.DispatcherConfig{})
	_, err := d.DispatchOnce(ctx)
	require.NoError(t, err)
	r := rowOf(t, name, "order.42")
	require.Equal(t, "dead", r.State)
	require.Contains(t, r.Error, "contains '.'")
	require.Equal(t, "delivered", rowOf(t, name, "order-43").State)
	all := got()
	require.Len(t, all, 1, "the message with '.' was sent")
	require.Equal(t, "order-43", all[0].header.Get("webhook-id"))

	// Unsigned, the same ID is no problem.
	err = (&outbox.HTTPPublisher{URL: srv.URL}).Publish(ctx, outbox.Delivery{Message: outbox.Message{ID: "order.42", Topic: "t"}})
	require.NoError(t, err)
}

// A message's own headers cannot stand in for the publisher's signature.
func TestHTTPPublisherSignatureOverridesMessageHeaders(t *testing.T) {
	t.Parallel()
	srv, got := receiver(t)
	secret := randomSecret(rand.New(rand.NewPCG(3, 4)))
	now := time.Unix(1_700_000_000, 0)
	pub := &outbox.HTTPPublisher{URL: srv.URL, SigningSecrets: []string{secret}, Now: func() time.Time { return now }}
	require.NoError(t, pub.Publish(context.Background(), outbox.Delivery{Message: outbox.Message{
		ID: "m1", Topic: "t", Payload: []byte("x"),
		Headers: map[string]string{"webhook-id": "forged", "webhook-signature": "v1,AAAA", "webhook-timestamp": "1"},
	}}))
	r := got()[0]
	require.Equal(t, []string{"m1"}, r.header.Values("webhook-id"))
	require.Equal(t, []string{"1700000000"}, r.header.Values("webhook-timestamp"))
	_, err := webhook.StandardWebhooks{Secrets: []string{secret}}.Verify(r.header, r.body, now)
	require.NoError(t, err)
	// Without secrets, nothing is signed.
	require.NoError(t, (&outbox.HTTPPublisher{URL: srv.URL}).Publish(context.Background(), outbox.Delivery{Message: outbox.Message{ID: "m2", Topic: "t"}}))
	require.Empty(t, got()[1].header.Get("webhook-signature"))
}

// Settings that cannot work are refused when the dispatcher is built, each naming its field,
// and by Publish as permanent.
func TestHTTPPublisherValidate(t *testing.T) {
	t.Parallel()
	o, _ := setup(t, nil)
	good := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	route := func(outbox.Delivery) (string, error) { return "http://example.com", nil }
	for _, tc := range []struct {
		name, field, problem string
		pub                  *outbox.HTTPPublisher
	}{
		{"EmptyURL", "HTTPPublisher.URL", "is empty", &outbox.HTTPPublisher{}},
		{"FTP", "HTTPPublisher.URL", `scheme "ftp"`, &outbox.HTTPPublisher{URL: "ftp://example.com/in"}},
		{"NoScheme", "HTTPPublisher.URL", `scheme ""`, &outbox.HTTPPublisher{URL: "example.com/in"}},
		{"NoHost", "HTTPPublisher.URL", "no host", &outbox.HTTPPublisher{URL: "https:///in"}},
		{"Unparsable", "HTTPPublisher.URL", "does not parse", &outbox.HTTPPublisher{URL: "http://[::1"}},
		{"SecretNotBase64", "HTTPPublisher.SigningSecrets[1]", "not base64", &outbox.HTTPPublisher{URL: "https://example.com", SigningSecrets: []string{good, "whsec_not*base64"}}},
		{"SecretEmpty", "HTTPPublisher.SigningSecrets[0]", "is empty", &outbox.HTTPPublisher{Route: route, SigningSecrets: []string{""}}},
		{"SecretNoBytes", "HTTPPublisher.SigningSecrets[0]", "no key bytes", &outbox.HTTPPublisher{Route: route, SigningSecrets: []string{"whsec_"}}},
		{"SecretNewline", "HTTPPublisher.SigningSecrets[0]", "white space", &outbox.HTTPPublisher{Route: route, SigningSecrets: []string{good + "\n"}}},
		{"SecretAsymmetric", "HTTPPublisher.SigningSecrets[0]", "asymmetric", &outbox.HTTPPublisher{Route: route, SigningSecrets: []string{"whsk_" + good[6:]}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.pub.Validate()
			var ce *outbox.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
			require.Contains(t, ce.Problem, tc.problem)
			_, err = outbox.NewDispatcher(o, tc.pub, nil)
			require.ErrorAs(t, err, &ce, "NewDispatcher took a publisher that cannot work")
			err = tc.pub.Publish(context.Background(), outbox.Delivery{Message: outbox.Message{ID: "m", Topic: "t"}})
			require.True(t, outbox.IsPermanent(err), "%v", err)
			require.ErrorAs(t, err, &ce)
		})
	}
	for _, ok := range []*outbox.HTTPPublisher{
		{URL: "http://example.com/in"},
		{URL: "https://user:pw@example.com:8443/in?x=1", SigningSecrets: []string{good, good[6:]}},
		{Route: route},
	} {
		require.NoError(t, ok.Validate())
	}
}

// A Route that gives a URL that cannot work parks the message as dead, saying why.
func TestHTTPPublisherRouteURLMustBeHTTP(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"", "file:///etc/passwd", "/relative"} {
		pub := &outbox.HTTPPublisher{Route: func(outbox.Delivery) (string, error) { return target, nil }}
		err := pub.Publish(context.Background(), outbox.Delivery{Message: outbox.Message{ID: "m", Topic: "t"}})
		require.True(t, outbox.IsPermanent(err), "%q: %v", target, err)
		require.Contains(t, err.Error(), "Route")
	}
}

// countingBody counts what the publisher reads of a response body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingTransport struct{ n *atomic.Int64 }

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if resp != nil {
		resp.Body = countingBody{resp.Body, c.n}
	}
	return resp, err
}

// A receiver cannot make the publisher read an unbounded body: a 2xx's and an error's are both
// read no further than 64 KiB; and the error the dispatcher stores is short, its control
// characters escaped.
func TestHTTPPublisherBoundsWhatItReads(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	for _, status := range []int{http.StatusOK, http.StatusInternalServerError, http.StatusBadRequest} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			// The timeout ends a publisher that reads on and on, so that the check below fails.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				line := []byte("evil\x1b[31m\r\nline\x00\xff ")
				for ctx.Err() == nil {
					if _, err := w.Write(line); err != nil {
						return
					}
				}
			}))
			defer srv.Close()
			defer cancel() // before srv.Close, which waits for the handler
			var n atomic.Int64
			pub := &outbox.HTTPPublisher{URL: srv.URL, Client: &http.Client{Transport: countingTransport{&n}}}
			err := pub.Publish(ctx, outbox.Delivery{Message: outbox.Message{ID: "m", Topic: "t"}})
			require.LessOrEqual(t, n.Load(), int64(limit), "read more than 64 KiB of the answer")
			if status == http.StatusOK {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Equal(t, status == http.StatusBadRequest, outbox.IsPermanent(err), "%v", err)
			msg := err.Error()
			require.LessOrEqual(t, len(msg), 520, "the error is not cut short")
			require.NotContains(t, msg, "\x1b")
			require.NotContains(t, msg, "\r")
			require.NotContains(t, msg, "\x00")
			require.Contains(t, msg, `\x1b[31m\r\nline\x00\xff`, "control characters are not escaped")
		})
	}
}

// The 3xx error quotes the Location with its control characters escaped, and cut short.
func TestHTTPPublisherRedirectErrorIsClean(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/x"+strings.Repeat("\u00e9", 2000))
		w.WriteHeader(http.StatusFound)
	}))
	defer srv.Close()
	err := (&outbox.HTTPPublisher{URL: srv.URL}).Publish(context.Background(), outbox.Delivery{Message: outbox.Message{ID: "m", Topic: "t"}})
	require.Error(t, err)
	require.False(t, outbox.IsPermanent(err))
	require.Contains(t, err.Error(), "302")
	require.Less(t, len(err.Error()), 1000, fmt.Sprint(len(err.Error())))
}
