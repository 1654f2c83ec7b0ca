//go:build unix

package faults_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/samples/payment"
)

// quickCharge runs QuickCharge (the order's business key, "charge" / "order/<id>") under an
// optional tenant and returns its charge or error.
func (w *world) quickCharge(workflowID, tenant string, o payment.Order) (downstream.Charge, error) {
	ctx := context.Background()
	if tenant != "" {
		ctx = keys.WithTenant(ctx, tenant)
	}
	run, err := w.temporal.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflowID, TaskQueue: w.queue}, "QuickCharge", o)
	if err != nil {
		return downstream.Charge{}, err
	}
	return quickChargeResult(run)
}

// quickChargeResult waits for a QuickCharge run's charge or error.
func quickChargeResult(run client.WorkflowRun) (downstream.Charge, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ch downstream.Charge
	return ch, run.Get(ctx, &ch)
}

// Row 7: concurrent duplicates of one intent, from many goroutines and two worker processes:
// one charge; every caller gets it; no raw unique-violation error anywhere.
func TestRow07ConcurrentDuplicates(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	w.startWorker()
	o := w.order("o")
	o.ChargeFaults = "slow=500ms" // keep the first in flight while the others arrive
	charges := make([]downstream.Charge, 12)
	errs := make([]error, 12)
	var wg sync.WaitGroup
	for i := range charges {
		wg.Go(func() { charges[i], errs[i] = w.quickCharge(o.ID+"-checkout-"+string(rune('a'+i)), "", o) })
	}
	wg.Wait()
	for i := range charges {
		require.NoError(t, errs[i])
		require.Equal(t, charges[0].ID, charges[i].ID, "checkout %d got another charge", i)
	}
	require.Len(t, w.charges(o.ID), 1, "duplicates charged twice")
	require.Equal(t, 1, w.receiptCount())
	require.Equal(t, 1, w.ledger().RequestsByKey[charges[0].Token], "a duplicate got past the receipt to the provider")
}

// Row 8: the same key with a different payload is a non-retryable mismatch, and the provider is
// not called. (Reordered JSON is the same request: keys' TestCanonicalize and the activity package's
// tests; a Go struct has no key order to change on the wire.)
func TestRow08SameKeyDifferentPayload(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	first, err := w.quickCharge(o.ID+"-1", "", o)
	require.NoError(t, err)
	requests := w.ledger().RequestsByKey[first.Token]

	changed := o
	changed.Amount++
	_, err = w.quickCharge(o.ID+"-2", "", changed)
	temporaltest.RequireAppError(t, err, activity.ErrTypePayloadMismatch, false)
	changed = o
	changed.Address = "2 Main St" // a field the provider never sees is part of the request too
	_, err = w.quickCharge(o.ID+"-3", "", changed)
	temporaltest.RequireAppError(t, err, activity.ErrTypePayloadMismatch, false)
	require.Equal(t, requests, w.ledger().RequestsByKey[first.Token], "a mismatched request reached the provider")
	require.Len(t, w.charges(o.ID), 1)
}

// Row 12: the provider answers 5xx, 429, slowly, or declines. Every attempt carries the same
// key, so each order is charged once; a decline is recorded once and replayed, never retried
// into a charge.
func TestRow12ProviderFaults(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	// Requests the provider sees: the faulted ones, then the one that gets through (a dropped
	// answer is followed by a replay of the stored charge).
	for faults, requests := range map[string]int{"fail_500=3": 4, "rate_limit=2,retry_after=1s": 3, "drop=1": 2} {
		o := w.order(strings.NewReplacer("=", "", ",", "", "_", "").Replace(faults))
		o.ChargeFaults = faults
		r := w.result(w.saga(o))
		require.Equal(t, payment.StatusCompleted, r.Status, faults)
		require.Len(t, w.charges(o.ID), 1, faults)
		require.Equal(t, requests, w.ledger().RequestsByKey[stepToken(r, "charge")], "%s: the retries did not reuse the key", faults)
	}

	// At the gateway that does not deduplicate, a charge whose connection drops is sent once:
	// neither net/http nor tempotent sends it again; the next attempt reconciles and finds it.
	legacy := w.order("legacydrop")
	legacy.Gateway, legacy.ChargeFaults = payment.GatewayLegacy, "drop=1"
	r := w.result(w.saga(legacy))
	require.Equal(t, payment.StatusCompleted, r.Status)
	require.Len(t, w.charges(legacy.ID), 1, "a dropped connection to a gateway that does not deduplicate charged twice")
	require.Equal(t, 1, w.ledger().RequestsByKey[stepToken(r, "charge")], "the charge was sent again")

	o := w.order("declined")
	o.Card = "tok_chargeDeclined"
	for i := range 2 { // the second checkout replays the recorded decline
		_, err := w.quickCharge(o.ID+"-"+string(rune('a'+i)), "", o)
		temporaltest.RequireAppError(t, err, downstream.ErrTypeRejected, false)
	}
	tok := keys.Key{Namespace: "default", Operation: "charge", ID: "explicit:order/" + o.ID}.Token()
	require.Equal(t, 1, w.ledger().RequestsByKey[tok.String()], "a decline was retried")
	require.Empty(t, w.charges(o.ID))
}

// Row 15: another tenant reuses a key. Tenant B's checkout of the same order gets its own
// charge and never tenant A's.
func TestRow15TenantReusesKey(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	o := w.order("o")
	a, err := w.quickCharge(o.ID+"-a", "tenant-a", o)
	require.NoError(t, err)
	b, err := w.quickCharge(o.ID+"-b", "tenant-b", o)
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID, "tenant B was given tenant A's charge")
	require.NotEqual(t, a.Token, b.Token)
	again, err := w.quickCharge(o.ID+"-a2", "tenant-a", o)
	require.NoError(t, err)
	require.Equal(t, a.ID, again.ID)
	require.Len(t, w.charges(o.ID), 2)
}

// Row 16: malformed keys and tenants are refused, typed, before any write or call.
func TestRow16MalformedKeysAndTenants(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	for name, tenant := range map[string]string{"NUL": "acme\x00", "Control": "acme\x1b", "InvalidUTF8": "acme\xff", "TooLong": strings.Repeat("t", keys.MaxNameLen+1)} {
		_, err := w.quickCharge(w.queue+"-tenant-"+name, tenant, w.order("t"+name))
		require.ErrorIs(t, err, keys.ErrInvalidKey, name) // refused by the client's propagator
	}
	long := w.order(strings.Repeat("x", keys.MaxIDLen)) // "order/" + it is over the limit
	_, err := w.quickCharge(w.queue+"-long", "", long)
	temporaltest.RequireAppError(t, err, activity.ErrTypeInvalidKey, false)
	require.Empty(t, w.ledger().Charges)
	require.Empty(t, w.ledger().RequestsByKey)
	var receipts int
	require.NoError(t, w.db().QueryRow(context.Background(), "SELECT count(*) FROM "+w.schema+".receipts").Scan(&receipts))
	require.Zero(t, receipts)
}

// Row 17: a result larger than the configured limit is a typed non-retryable error and nothing
// is half-stored: the receipt records the failure, without a result, and the saga compensates
// the charge that did happen.
func TestRow17OversizedResult(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker("TEMPOTENT_MAX_PAYLOAD_BYTES=512")
	o := w.order(strings.Repeat("big", 200)) // the charge echoes the order ID: a 600-byte result
	r := w.result(w.saga(o))
	require.Equal(t, payment.StatusCompensated, r.Status)
	require.True(t, strings.HasPrefix(r.Reason, activity.ErrTypePayloadTooLarge), r.Reason)
	state, _, payload := w.receipt("charge", "/charge#1")
	require.Equal(t, operator.StateFailed, state)
	require.Nil(t, payload, "a result was stored")
	require.Len(t, w.charges(o.ID), 1)
	require.Equal(t, 1, w.refunds(o.ID), "the charge whose result was refused was not refunded")
}
