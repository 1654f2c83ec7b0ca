package fakepay_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/keys"
)

const webhookSecret = "whsec_test"

// received is one delivery that passed the receiver's signature check.
type received struct {
	ID     string
	Type   string
	Object map[string]any // data.object: the charge
	Body   []byte
	At     time.Time
}

// receiver is a webhook endpoint that checks every delivery's Stripe signature with an HMAC of
// its own (not fakepay's), records it, and answers what answer says (200 when answer is nil).
// answer may run concurrently.
type receiver struct {
	URL    string
	answer func(received) int

	mu  sync.Mutex
	got []received
}

func newReceiver(t *testing.T, answer func(received) int) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = verifySignature(r.Header.Get("Stripe-Signature"), body)
		}
		if err == nil && r.Header.Get("Content-Type") != "application/json" {
			err = fmt.Errorf("Content-Type %q, want application/json", r.Header.Get("Content-Type"))
		}
		var e struct {
			ID     string `json:"id"`
			Object string `json:"object"`
			Type   string `json:"type"`
			Data   struct {
				Object map[string]any `json:"object"`
			} `json:"data"`
		}
		if err == nil {
			err = json.Unmarshal(body, &e)
		}
		if err != nil || e.Object != "event" {
			t.Errorf("bad delivery (%v): %s", err, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got := received{ID: e.ID, Type: e.Type, Object: e.Data.Object, Body: body, At: time.Now()}
		rc.mu.Lock()
		rc.got = append(rc.got, got)
		rc.mu.Unlock()
		status := http.StatusOK
		if rc.answer != nil {
			status = rc.answer(got)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(hs.Close)
	rc.URL = hs.URL
	return rc
}

// verifySignature checks a Stripe-Signature header the way Stripe's libraries do.
func verifySignature(header string, body []byte) error {
	var ts, v1 string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("signature %q: no timestamp", header)
	}
	if age := time.Since(time.Unix(sec, 0)); age < -time.Minute || age > 5*time.Minute {
		return fmt.Errorf("signature %q: timestamp %v old", header, age)
	}
	mac := hmac.New(sha256.New, []byte(webhookSecret))
	mac.Write([]byte(ts + "." + string(body)))
	got, err := hex.DecodeString(v1)
	if err != nil || !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("signature %q does not match the body", header)
	}
	return nil
}

// config returns webhook settings that send to rc.
func (rc *receiver) config() fakepay.WebhookConfig {
	return fakepay.WebhookConfig{URL: rc.URL, Secret: webhookSecret, EventIDPrefix: "evt_"} // IDs the tests can name
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// ids returns the event IDs received, in order of arrival.
func (rc *receiver) ids() []string {
	var ids []string
	for _, r := range rc.received() {
		ids = append(ids, r.ID)
	}
	return ids
}

// requireSettled waits until srv has no pending delivery and has created want events.
func requireSettled(t *testing.T, srv *fakepay.Server, want int) fakepay.LedgerWebhooks {
	t.Helper()
	require.Eventually(t, func() bool {
		w := srv.Ledger().Webhooks
		n := 0
		for _, c := range w.EventsByType {
			n += c
		}
		return n == want && w.Pending == 0
	}, 5*time.Second, 5*time.Millisecond, "ledger: %+v", srv.Ledger().Webhooks)
	return srv.Ledger().Webhooks
}

func getCharge(t *testing.T, client *fakepay.Client, id string) map[string]any {
	t.Helper()
	resp, err := http.Get(client.BaseURL + "/v1/charges/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var ch map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ch))
	return ch
}

func refundCtx(id string) context.Context {
	return keys.WithToken(context.Background(), keys.Key{Namespace: "default", Operation: "refund", ID: id}.Token())
}

func TestWebhookEvents(t *testing.T) {
	t.Parallel()

	t.Run("ChargeAndRefund", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, nil)
		srv, client := start(t, &fakepay.Config{Webhooks: rc.config()})
		ctx, tok := keyed("wh-charge")
		ch, err := client.Charge(ctx, req)
		require.NoError(t, err)
		_, err = client.Charge(ctx, req) // a replayed answer is no change: no event
		require.NoError(t, err)
		declineCtx, _ := keyed("wh-decline")
		_, err = client.Charge(declineCtx, downstream.ChargeRequest{Amount: 1, Currency: "eur", Source: "tok_chargeDeclined"})
		require.Error(t, err) // a synchronous decline makes no charge: no event
		_, err = client.Refund(refundCtx("wh-charge"), tok)
		require.NoError(t, err)

		w := requireSettled(t, srv, 2)
		require.Equal(t, map[string]int{fakepay.EventChargeSucceeded: 1, fakepay.EventChargeRefunded: 1}, w.EventsByType)
		require.Equal(t, map[string]int{"evt_00000001": 1, "evt_00000002": 1}, w.DeliveredByEvent)
		require.Equal(t, 2, w.Attempts)
		require.Equal(t, 2, w.Delivered)

		got := rc.received()
		require.Len(t, got, 2)
		require.Equal(t, []string{"evt_00000001", "evt_00000002"}, rc.ids(), "without faults, events arrive in the order made")
		succeeded, refunded := got[0], got[1]
		require.Equal(t, fakepay.EventChargeSucceeded, succeeded.Type)
		require.Equal(t, ch.ID, succeeded.Object["id"])
		require.Equal(t, "succeeded", succeeded.Object["status"])
		require.Equal(t, false, succeeded.Object["refunded"], "the event shows the charge as it was then")
		require.Equal(t, map[string]any{downstream.TokenMetadataKey: tok.String()}, succeeded.Object["metadata"])
		require.Equal(t, fakepay.EventChargeRefunded, refunded.Type)
		require.Equal(t, getCharge(t, client, ch.ID), refunded.Object, "data.object is the charge as GET returns it")
		require.Equal(t, true, refunded.Object["refunded"])
	})

	t.Run("AsyncSucceeds", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, nil)
		srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) { w.AsyncDelay = 20 * time.Millisecond })})
		ctx, tok := keyed("wh-async")
		async := downstream.ChargeRequest{Amount: 1000, Currency: "eur", Source: "tok_async"}
		ch, err := client.Charge(ctx, async)
		require.NoError(t, err)
		require.Equal(t, "processing", ch.Status)

		requireSettled(t, srv, 1)
		got := rc.received()
		require.Equal(t, fakepay.EventChargeSucceeded, got[0].Type)
		require.Equal(t, getCharge(t, client, ch.ID), got[0].Object)
		require.Equal(t, "succeeded", got[0].Object["status"])
		found, ok, err := client.Lookup(ctx, tok)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "succeeded", found.Status, "search shows the status of the moment")
		again, err := client.Charge(ctx, async)
		require.NoError(t, err)
		require.Equal(t, "processing", again.Status, "a replay answers what was answered")
		require.Equal(t, "succeeded", srv.Ledger().Charges[0].Status)
	})

	t.Run("AsyncFails", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, nil)
		srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) { w.AsyncDelay = 20 * time.Millisecond })})
		ctx, tok := keyed("wh-async-fail")
		ch, err := client.Charge(ctx, downstream.ChargeRequest{Amount: 1000, Currency: "eur", Source: "tok_asyncDeclined"})
		require.NoError(t, err)
		require.Equal(t, "processing", ch.Status)

		requireSettled(t, srv, 1)
		got := rc.received()
		require.Equal(t, fakepay.EventChargeFailed, got[0].Type)
		require.Equal(t, "failed", got[0].Object["status"])
		require.Equal(t, "failed", getCharge(t, client, ch.ID)["status"])
		r, err := client.Refund(refundCtx("wh-async-fail"), tok)
		require.NoError(t, err)
		require.Equal(t, downstream.RefundNoCharge, r.Status, "a failed charge moved no money")
	})

	t.Run("ProcessingIsNotRefundable", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, nil)
		srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) { w.AsyncDelay = time.Hour })})
		ctx, tok := keyed("wh-processing")
		_, err := client.Charge(ctx, downstream.ChargeRequest{Amount: 1000, Currency: "eur", Source: "tok_async"})
		require.NoError(t, err)
		found, _, err := client.Lookup(ctx, tok)
		require.NoError(t, err)
		require.Equal(t, "processing", found.Status)
		_, err = client.Refund(refundCtx("wh-processing"), tok)
		e, ok := downstream.As(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, "charge_not_settled", e.Code)
		require.Empty(t, srv.Ledger().Webhooks.EventsByType, "processing is no event")
	})
}

func with(w fakepay.WebhookConfig, set func(*fakepay.WebhookConfig)) fakepay.WebhookConfig {
	set(&w)
	return w
}

func TestWebhookAtLeastOnce(t *testing.T) {
	t.Parallel()

	t.Run("RetriedUntil2xx", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		rc := newReceiver(t, func(received) int {
			if calls.Add(1) <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		srv, client := start(t, &fakepay.Config{Webhooks: rc.config()})
		ctx, _ := keyed("wh-retry")
		_, err := client.Charge(ctx, req)
		require.NoError(t, err)

		w := requireSettled(t, srv, 1)
		require.Equal(t, 3, w.Attempts)
		require.Equal(t, 1, w.Delivered)
		require.Equal(t, map[string]int{"evt_00000001": 1}, w.DeliveredByEvent)
		got := rc.received()
		require.Len(t, got, 3)
		require.Equal(t, got[0].Body, got[2].Body, "a retry sends the same body")
	})

	t.Run("AbandonedAfterMaxAge", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, func(received) int { return http.StatusServiceUnavailable })
		srv, client := start(t, &fakepay.Config{Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) {
			w.RetryMin, w.RetryMax, w.MaxAge = 5*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond
		})})
		ctx, _ := keyed("wh-abandon")
		_, err := client.Charge(ctx, req)
		require.NoError(t, err)

		w := requireSettled(t, srv, 1)
		require.Equal(t, 1, w.Abandoned)
		require.Zero(t, w.Delivered)
		require.Greater(t, w.Attempts, 1)
	})
}

func TestWebhookFaults(t *testing.T) {
	t.Parallel()

	t.Run("DuplicateArrivesConcurrently", func(t *testing.T) {
		t.Parallel()
		// Each delivery waits until two are in the receiver at once: the original and its
		// first copy. Were they sent one after the other, the first would time out.
		var inside atomic.Int32
		together := make(chan struct{})
		var once sync.Once
		rc := newReceiver(t, func(received) int {
			if inside.Add(1) == 2 {
				once.Do(func() { close(together) })
			}
			defer inside.Add(-1)
			select {
			case <-together:
			case <-time.After(2 * time.Second):
			}
			return http.StatusOK
		})
		srv, client := start(t, &fakepay.Config{Webhooks: rc.config(), Faults: fakepay.Faults{WebhookDuplicate: 2}})
		ctx, _ := keyed("wh-dup")
		_, err := client.Charge(ctx, req)
		require.NoError(t, err)

		w := requireSettled(t, srv, 1)
		require.Equal(t, map[string]int{"evt_00000001": 3}, w.DeliveredByEvent, "the event and 2 copies")
		require.Equal(t, []string{"evt_00000001", "evt_00000001", "evt_00000001"}, rc.ids())
		select {
		case <-together:
		default:
			require.Fail(t, "no two deliveries were in the receiver at once")
		}
	})

	t.Run("FailLosesTheAnswer", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, nil)
		srv, client := start(t, &fakepay.Config{Webhooks: rc.config(), Faults: fakepay.Faults{WebhookFail: 2}})
		ctx, _ := keyed("wh-fail")
		_, err := client.Charge(ctx, req)
		require.NoError(t, err)

		w := requireSettled(t, srv, 1)
		require.Equal(t, 3, w.Attempts)
		require.Equal(t, map[string]int{"evt_00000001": 3}, w.DeliveredByEvent, "the receiver accepted all three")
		require.Len(t, rc.received(), 3)
	})

	t.Run("Delay", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, nil)
		srv, client := start(t, &fakepay.Config{Webhooks: rc.config(), Faults: fakepay.Faults{WebhookDelay: 500 * time.Millisecond}})
		made := map[string]time.Time{} // charge ID → before it was made
		for i := range 10 {
			ctx, _ := keyed(fmt.Sprint("wh-delay-", i))
			before := time.Now()
			ch, err := client.Charge(ctx, req)
			require.NoError(t, err)
			made[ch.ID] = before
		}

		requireSettled(t, srv, 10)
		var longest time.Duration
		for _, r := range rc.received() {
			longest = max(longest, r.At.Sub(made[r.Object["id"].(string)]))
		}
		// Ten delays drawn up to 500ms all stay under 100ms once in 10^7 runs.
		require.Greater(t, longest, 100*time.Millisecond)
	})

	for _, reorder := range []bool{false, true} {
		t.Run(fmt.Sprint("Reorder", reorder), func(t *testing.T) {
			t.Parallel()
			// The receiver holds the first delivery until all events are queued, so that the
			// sender has all of them to choose from.
			release := make(chan struct{})
			var first sync.Once
			rc := newReceiver(t, func(received) int {
				first.Do(func() {
					select {
					case <-release:
					case <-time.After(5 * time.Second):
					}
				})
				return http.StatusOK
			})
			srv, client := start(t, &fakepay.Config{Webhooks: rc.config(), Faults: fakepay.Faults{WebhookReorder: reorder}})
			const n = 20
			for i := range n {
				ctx, _ := keyed(fmt.Sprint("wh-reorder-", i))
				_, err := client.Charge(ctx, req)
				require.NoError(t, err)
			}
			close(release)

			requireSettled(t, srv, n)
			ids := rc.ids()
			require.Len(t, ids, n)
			// The first delivery was picked alone; the other 19 can come in order by chance
			// once in 19! runs.
			require.Equal(t, !reorder, slices.IsSorted(ids[1:]), "%v", ids)
		})
	}
}

func TestWebhookReplay(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	srv, client := start(t, &fakepay.Config{Webhooks: rc.config()})
	ctx, tok := keyed("wh-replay")
	_, err := client.Charge(ctx, req)
	require.NoError(t, err)
	requireSettled(t, srv, 1)

	require.NoError(t, client.ReplayWebhook(context.Background(), "evt_00000001"))
	require.Eventually(t, func() bool { return len(rc.received()) == 2 }, 5*time.Second, 5*time.Millisecond)
	got := rc.received()
	require.Equal(t, "evt_00000001", got[1].ID)
	require.Equal(t, got[0].Body, got[1].Body, "a replay sends the same body")

	err = client.ReplayWebhook(context.Background(), "evt_99999999")
	e, ok := downstream.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, http.StatusNotFound, e.Status)
	require.Equal(t, "resource_missing", e.Code)

	_, err = client.Refund(refundCtx("wh-replay"), tok)
	require.NoError(t, err)
	requireSettled(t, srv, 2)
	replayed, err := client.ReplayAllWebhooks(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"evt_00000001", "evt_00000002"}, replayed)

	w := requireSettled(t, srv, 2)
	require.Equal(t, map[string]int{"evt_00000001": 3, "evt_00000002": 2}, w.DeliveredByEvent)
	require.Len(t, rc.received(), 5)
	require.Equal(t, map[string]int{fakepay.EventChargeSucceeded: 1, fakepay.EventChargeRefunded: 1}, w.EventsByType, "a replay is no new event")
}

// TestWebhookRestart closes a fakepay while its receiver is down, checks that Close stopped the
// sender, and starts another on the same state file: it delivers the pending event.
func TestWebhookRestart(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	rc := newReceiver(t, func(received) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	cfg := &fakepay.Config{StatePath: filepath.Join(t.TempDir(), "state.json"), Webhooks: with(rc.config(), func(w *fakepay.WebhookConfig) {
		w.RetryMin, w.RetryMax = 5*time.Millisecond, 10*time.Millisecond
	})}
	srv, client := start(t, cfg)
	ctx, _ := keyed("wh-restart")
	_, err := client.Charge(ctx, req)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return srv.Ledger().Webhooks.Attempts >= 2 }, 5*time.Second, 5*time.Millisecond)

	srv.Close()
	attempts := srv.Ledger().Webhooks.Attempts
	require.Never(t, func() bool { return srv.Ledger().Webhooks.Attempts != attempts }, 200*time.Millisecond, 5*time.Millisecond,
		"the sender went on after Close")
	require.Equal(t, 1, srv.Ledger().Webhooks.Pending)

	up.Store(true)
	restarted, err := fakepay.New(cfg)
	require.NoError(t, err)
	t.Cleanup(restarted.Close)
	w := requireSettled(t, restarted, 1)
	require.Equal(t, map[string]int{"evt_00000001": 1}, w.DeliveredByEvent)
	require.Greater(t, w.Attempts, attempts, "the counts carry over")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		cfg  fakepay.WebhookConfig
		want string
	}{
		"NoSecret":       {fakepay.WebhookConfig{URL: "http://127.0.0.1:1/hook"}, "Webhooks.Secret is required"},
		"NotHTTP":        {fakepay.WebhookConfig{URL: "127.0.0.1:1/hook", Secret: "s"}, "Webhooks.URL"},
		"NotHTTPOrHTTPS": {fakepay.WebhookConfig{URL: "ftp://127.0.0.1:1/hook", Secret: "s"}, "Webhooks.URL"},
		"NegativeDelay":  {fakepay.WebhookConfig{AsyncDelay: -time.Second}, "Webhooks.AsyncDelay cannot be less than zero"},
		"RetryMaxBelowMin": {fakepay.WebhookConfig{RetryMin: time.Second, RetryMax: time.Millisecond},
			"Webhooks.RetryMax (1ms) cannot be less than RetryMin (1s)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := fakepay.New(&fakepay.Config{Webhooks: tt.cfg})
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// Two ledgers never make the same event ID, as two Stripe accounts do not: a receiver that
// remembers the IDs of an earlier fakepay must not take a new event for a replay.
func TestEventIDsAreUniqueAcrossLedgers(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	cfg := rc.config()
	cfg.EventIDPrefix = "" // the default
	req := downstream.ChargeRequest{Amount: 100, Currency: "eur", Source: "tok_visa"}
	for range 2 {
		srv, client := start(t, &fakepay.Config{Webhooks: cfg})
		ctx, _ := keyed("same-key")
		_, err := client.Charge(ctx, req)
		require.NoError(t, err)
		requireSettled(t, srv, 1)
	}
	ids := rc.ids()
	require.Len(t, ids, 2)
	require.NotEqual(t, ids[0], ids[1])
	require.True(t, strings.HasPrefix(ids[0], "evt_"), ids[0])
}
