package fakepay_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

// A run's counted fault (Config.Faults) applies to requests that carry no Fakepay-Fault header
// of their own.
func TestRunFaultsApplyWithoutAFaultHeader(t *testing.T) {
	t.Parallel()
	srv, client := start(t, &fakepay.Config{Faults: fakepay.Faults{Fail500: 1}})
	ctx, tok := keyed("run-fail-500")
	_, err := client.Charge(ctx, req)
	temporaltest.RequireAppError(t, err, downstream.ErrTypeUnavailable, true)
	_, err = client.Charge(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 1, srv.Ledger().ChargesByToken[tok.String()])
}

// A charge's description is sent, stored and returned.
func TestChargeKeepsItsDescription(t *testing.T) {
	t.Parallel()
	_, client := start(t, nil)
	ctx, tok := keyed("described")
	described := req
	described.Description = "order 42"
	ch, err := client.Charge(ctx, described)
	require.NoError(t, err)
	require.Equal(t, "order 42", ch.Description)
	found, ok, err := client.Lookup(ctx, tok)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "order 42", found.Description)
}

// Each processing charge settles once: a charge settled earlier is not settled again, with a
// second event, when a later one settles.
func TestAsyncChargesSettleOnce(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) { w.AsyncDelay = 20 * time.Millisecond })})
	async := downstream.ChargeRequest{Amount: 1000, Currency: "eur", Source: "tok_async"}
	var ids []string
	for i, key := range []string{"settle-a", "settle-b"} {
		ctx, _ := keyed(key)
		ch, err := client.Charge(ctx, async)
		require.NoError(t, err)
		ids = append(ids, ch.ID)
		requireSettled(t, srv, i+1)
	}
	var settled []string
	for _, got := range rc.received() {
		require.Equal(t, fakepay.EventChargeSucceeded, got.Type)
		settled = append(settled, got.Object["id"].(string))
	}
	require.Equal(t, ids, settled, "each charge settles once, in order")
}

// The webhook counts are part of the state: a fakepay restarted on the state file still counts
// the deliveries its receiver answered before.
func TestWebhookAnswersSurviveARestart(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	cfg := &fakepay.Config{StatePath: filepath.Join(t.TempDir(), "state.json"), Webhooks: rc.config()}
	srv, client := start(t, cfg)
	ctx, _ := keyed("wh-answered")
	_, err := client.Charge(ctx, req)
	require.NoError(t, err)
	before := requireSettled(t, srv, 1)
	require.Equal(t, map[string]int{"evt_00000001": 1}, before.DeliveredByEvent)
	srv.Close()

	restarted, err := fakepay.New(cfg)
	require.NoError(t, err)
	t.Cleanup(restarted.Close)
	require.Equal(t, before, restarted.Ledger().Webhooks)
}

// The run's webhook faults are part of the state: a fakepay restarted on the state file with a
// Config that does not set them keeps them.
func TestWebhookFaultsSurviveARestart(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		faults fakepay.Faults
		check  func(t *testing.T, rc *receiver)
	}{
		"Duplicate": {faults: fakepay.Faults{WebhookDuplicate: 1}, check: func(t *testing.T, rc *receiver) {
			require.Eventually(t, func() bool { return len(rc.received()) == 2 }, 5*time.Second, 5*time.Millisecond, "the event was not delivered twice")
		}},
		"Fail": {faults: fakepay.Faults{WebhookFail: 1}, check: func(t *testing.T, rc *receiver) {
			require.Eventually(t, func() bool { return len(rc.received()) == 2 }, 5*time.Second, 5*time.Millisecond, "the first answer was not lost")
		}},
		"Delay": {faults: fakepay.Faults{WebhookDelay: time.Hour}, check: func(t *testing.T, rc *receiver) {
			require.Never(t, func() bool { return len(rc.received()) > 0 }, 300*time.Millisecond, 5*time.Millisecond, "the event was not delayed")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state.json")
			// The first run has the faults and no webhooks; a charge saves its state.
			_, client := start(t, &fakepay.Config{StatePath: path, Faults: tc.faults})
			ctx, _ := keyed("first-run")
			_, err := client.Charge(ctx, req)
			require.NoError(t, err)

			rc := newReceiver(t, nil)
			_, client = start(t, &fakepay.Config{StatePath: path, Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) {
				w.RetryMin, w.RetryMax = 5*time.Millisecond, 10*time.Millisecond
			})})
			ctx, _ = keyed("second-run")
			_, err = client.Charge(ctx, req)
			require.NoError(t, err)
			tc.check(t, rc)
		})
	}
}

// A webhook URL may be https, and RetryMin and RetryMax may be equal (a fixed backoff).
func TestConfigAccepts(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]fakepay.WebhookConfig{
		"HTTPS":         {URL: "https://hooks.example.com/fakepay", Secret: "s"},
		"FixedRetryGap": {RetryMin: time.Second, RetryMax: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, err := fakepay.New(&fakepay.Config{Webhooks: w})
			require.NoError(t, err)
			srv.Close()
		})
	}
}

// A counted fault applies to the next requests that carry it, also on a key that served
// requests before it was set: paymentstest's FailNext promises that the next request of a token
// fails, whatever came before. (With ignore_keys every request executes, so a drop is reached
// on a key's second request too.)
func TestAFaultHeaderAppliesToAKeyUsedBefore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		before, fault, wantType string
	}{
		{fault: "fail_500=1", wantType: downstream.ErrTypeUnavailable},
		{fault: "rate_limit=1", wantType: downstream.ErrTypeRateLimited},
		{before: "ignore_keys", fault: "ignore_keys,drop=1", wantType: downstream.ErrTypeNetwork},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			_, client := start(t, nil)
			ft := &faultTransport{base: http.DefaultTransport, faults: map[string]string{}}
			client.HTTP = &http.Client{Transport: &downstream.Transport{Base: ft}}
			ctx, tok := keyed("used-before")
			fault := func(spec string) {
				ft.mu.Lock()
				defer ft.mu.Unlock()
				ft.faults[tok.String()] = spec
			}
			fault(tc.before)
			_, err := client.Charge(ctx, req)
			require.NoError(t, err)

			fault(tc.fault)
			_, err = client.Charge(ctx, req)
			temporaltest.RequireAppError(t, err, tc.wantType, true)
		})
	}
}

// A delivery that keeps failing is retried, after waits drawn below a ceiling that doubles from
// RetryMin (TestBackoffDoublesUpToTheLimit, TestRetryWaitIsFullJitter): the receiver sees more
// than one retry, none before it was due.
func TestWebhookRetriesBackOff(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(received) int { return http.StatusServiceUnavailable })
	_, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) {
		w.RetryMin, w.RetryMax = 5*time.Millisecond, time.Second
	})})
	ctx, _ := keyed("wh-backoff")
	_, err := client.Charge(ctx, req)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rc.received()) >= 5 }, 5*time.Second, time.Millisecond)
	got := rc.received()
	for i := 1; i < 5; i++ {
		require.Positive(t, got[i].At.Sub(got[i-1].At), "retry %d came with the attempt before it", i)
	}
}

// WebhookFail set during a run loses the answer to the next delivery of an event, also of one
// delivered before (here a replay).
func TestWebhookFailSetLaterAppliesToAnEventDeliveredBefore(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) {
		w.RetryMin, w.RetryMax = 5*time.Millisecond, 10*time.Millisecond
	})})
	ctx, _ := keyed("wh-fail-later")
	_, err := client.Charge(ctx, req)
	require.NoError(t, err)
	requireSettled(t, srv, 1)

	put, err := http.NewRequest(http.MethodPut, client.BaseURL+"/faults", strings.NewReader(`{"webhook_fail":1}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(put)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, client.ReplayWebhook(context.Background(), "evt_00000001"))
	require.Eventually(t, func() bool { return srv.Ledger().Webhooks.Pending == 0 && len(rc.received()) == 3 }, 5*time.Second, 5*time.Millisecond,
		"the replay's first answer was not lost")
}

// Only a 2xx answer delivers: a 3xx, a redirect (302) or not (300), is a failed attempt and is
// retried; fakepay follows no redirect, as Stripe does not.
func TestWebhook3xxIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusMultipleChoices, http.StatusFound} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var answered atomic.Int32
			rc := newReceiver(t, func(received) int {
				if answered.Add(1) == 1 {
					return status
				}
				return http.StatusOK
			})
			srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) {
				w.RetryMin, w.RetryMax = 5*time.Millisecond, 10*time.Millisecond
			})})
			ctx, _ := keyed("wh-3xx")
			_, err := client.Charge(ctx, req)
			require.NoError(t, err)
			w := requireSettled(t, srv, 1)
			require.Equal(t, 2, w.Attempts, "the %d was taken for a delivery", status)
			require.Equal(t, map[string]int{"evt_00000001": 1}, w.DeliveredByEvent)
		})
	}
}

// Charges and refunds have IDs of their own: a charge made after a refund does not take the ID
// of an earlier charge.
func TestIDsAreNeverReused(t *testing.T) {
	t.Parallel()
	srv, client := start(t, nil)
	ctx, tok := keyed("ids-first")
	first, err := client.Charge(ctx, req)
	require.NoError(t, err)
	rf, err := client.Refund(refundCtx("ids-first"), tok)
	require.NoError(t, err)
	ctx, _ = keyed("ids-second")
	second, err := client.Charge(ctx, req)
	require.NoError(t, err)
	require.NotEqual(t, first.ID, second.ID)
	ids := map[string]bool{rf.ID: true}
	for _, c := range srv.Ledger().Charges {
		require.False(t, ids[c.ID], "ID %s used twice", c.ID)
		ids[c.ID] = true
	}
	require.Len(t, ids, 3)
}

// A dropped answer is a closed connection: the caller learns at once that the outcome is
// unknown, without waiting for a timeout.
func TestDropClosesTheConnectionAtOnce(t *testing.T) {
	t.Parallel()
	_, client := start(t, &fakepay.Config{Faults: fakepay.Faults{Drop: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, tok := keyed("drop-at-once")
	_, err := client.Charge(keys.WithToken(ctx, tok), req)
	temporaltest.RequireAppError(t, err, downstream.ErrTypeNetwork, true)
	require.NoError(t, ctx.Err(), "the caller waited for its deadline: the connection was not closed")
}
