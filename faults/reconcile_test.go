//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/saga"
	"github.com/tempotent/tempotent/samples/payment"
)

// Row 19: reconcile cannot reach the provider, or is refused. LegacyCharge's gateway does not
// deduplicate; its first attempt charged and was killed before recording. The attempts that
// take over must not charge again: they ask the gateway's lookup, which is first down, then
// answers 401. Each such attempt fails retryably with ReconcileFailed and leaves the receipt
// saying that a charge may have happened; once the lookup answers, the receipt records the
// charge the first attempt made, and the saga completes with it.
func TestRow19ReconcileUnreachable(t *testing.T) {
	w := newWorld(t, worldOptions{})
	lookup := newLookupFront(t, w.payments.URL)
	o := w.order("o")
	o.Gateway = payment.GatewayLegacy
	run, token := w.killAfterCharge(o, "LOOKUP_URL="+lookup.url)

	w.startWorker("LOOKUP_URL=" + lookup.url)
	unresolved := func(when string) {
		t.Helper()
		rc := w.receiptRow("charge", "/charge#1")
		require.Equal(t, operator.StatePending, rc.State, when)
		require.True(t, rc.EffectPossible, "%s: the receipt forgot that a charge may have happened", when)
		require.Equal(t, 1, w.ledger().RequestsByKey[token], "%s: the gateway was called again", when)
	}
	// Nothing listens on the lookup's port.
	awaitAttemptFailure(t, w, run, "LegacyCharge", activity.ErrTypeReconcileFailed, "connection refused")
	unresolved("lookup down")
	// The lookup answers, but refuses the worker (a revoked API key).
	lookup.set(lookupRefuses)
	awaitAttemptFailure(t, w, run, "LegacyCharge", activity.ErrTypeReconcileFailed, "401")
	unresolved("lookup refuses")

	lookup.set(lookupForwards)
	r := w.result(run)
	require.Equal(t, payment.StatusCompleted, r.Status)
	require.Equal(t, token, stepToken(r, "charge"))
	charges := w.charges(o.ID)
	require.Len(t, charges, 1, "a second charge")
	require.Equal(t, charges[0].ID, r.ChargeID, "the reconcile did not return the first attempt's charge")
	require.Equal(t, 1, w.ledger().RequestsByKey[token], "the gateway was called again")
	rc := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StateCompleted, rc.State)
	require.GreaterOrEqual(t, rc.Fence, int64(4), "three attempts took over: lookup down, refusing, answering")
	require.Zero(t, w.pending())
}

// Modes of a lookupFront.
const (
	lookupRefuses  = iota + 1 // 401
	lookupDrops               // closes the connection without an answer
	lookupForwards            // to fakepay
)

// lookupFront is the address the worker's reconcile looks charges up at: nothing listens there
// until the test sets a mode, then it answers 401, drops the connection, or forwards to fakepay.
type lookupFront struct {
	t    *testing.T
	url  string
	srv  *http.Server
	mode atomic.Int32
	once sync.Once
}

func newLookupFront(t *testing.T, fakepayURL string) *lookupFront {
	t.Helper()
	port, err := freeport.Get()
	require.NoError(t, err)
	f := &lookupFront{t: t, url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	target, err := url.Parse(fakepayURL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	f.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch f.mode.Load() {
		case lookupForwards:
			proxy.ServeHTTP(rw, r)
			return
		case lookupDrops:
			if conn, _, err := http.NewResponseController(rw).Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(rw, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`)
	})}
	t.Cleanup(func() { _ = f.srv.Close() })
	return f
}

// set sets the mode, opening the port the first time.
func (f *lookupFront) set(mode int32) {
	f.t.Helper()
	f.mode.Store(mode)
	f.once.Do(func() {
		ln, err := net.Listen("tcp", strings.TrimPrefix(f.url, "http://"))
		require.NoError(f.t, err)
		go func() { _ = f.srv.Serve(ln) }()
	})
}

// Row 22: a takeover past the downstream's key memory. The first charge attempt charged and was
// killed; before the takeover, the receipt's first reservation is moved back 25 hours on the
// database clock, past the provider's key memory (24 hours, the default Options.DownstreamKeyMemory), which
// may have forgotten the token. Sending it again could charge twice, and Charge has no
// reconcile: the takeover must fail with OutcomeUnknown without calling the provider, and the
// saga compensates the charge that may have happened (it did: the refund finds and undoes it).
func TestRow22TakeoverPastKeyMemory(t *testing.T) {
	w := newWorld(t, worldOptions{})
	o := w.order("o")
	run, token := w.killAfterCharge(o)

	tag, err := w.db().Exec(context.Background(), "UPDATE "+w.schema+".receipts SET created_at = created_at - interval '25 hours' WHERE operation = 'charge'")
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())

	w.startWorker()
	r := w.result(run)
	require.Equal(t, payment.StatusCompensated, r.Status)
	require.Contains(t, r.Reason, activity.ErrTypeOutcomeUnknown)
	require.Equal(t, 1, w.ledger().RequestsByKey[token], "the takeover sent a token the provider may have forgotten")
	require.Len(t, w.charges(o.ID), 1)
	require.Equal(t, 1, w.refunds(o.ID), "the charge that may have happened was not refunded once")
	rc := w.receiptRow("charge", "/charge#1")
	require.Equal(t, operator.StateFailed, rc.State)
	require.NotNil(t, rc.ErrorType)
	require.Equal(t, activity.ErrTypeOutcomeUnknown, *rc.ErrorType)
	for _, s := range r.Saga.Steps {
		if s.Name == "charge" {
			require.Equal(t, saga.OutcomeUnknown, s.Outcome)
		}
	}
	require.Zero(t, w.pending())
}
