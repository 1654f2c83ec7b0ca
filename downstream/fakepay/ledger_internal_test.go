package fakepay

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoadStateMakesItsMaps loads state files that lack the idempotency records or the webhook
// answers (written by hand, or by a fakepay before webhooks) and requires a state that can be
// written to and read: before the ledger had a loader of its own, this was reachable only by
// starting a Server on such a file.
func TestLoadStateMakesItsMaps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"instance":"abcd1234","seq":2}`), 0o600))
	st, err := loadState(path)
	require.NoError(t, err)
	require.Equal(t, "abcd1234", st.Instance)
	require.Equal(t, 2, st.Seq)
	st.remember("k", "POST /v1/charges amount=1", http.StatusOK, []byte(`{}`), time.Now())
	require.NotNil(t, st.ledger().Webhooks.DeliveredByEvent, "the webhook answers were not made")

	for name, path := range map[string]string{"NoPath": "", "NoFileYet": filepath.Join(dir, "absent.json")} {
		st, err := loadState(path)
		require.NoError(t, err, name)
		require.NotNil(t, st.Keys, name)
		require.Len(t, st.Instance, 8, "%s: a new ledger gets a random instance", name)
	}

	require.NoError(t, os.WriteFile(path, []byte(`[]`), 0o600))
	_, err = loadState(path)
	require.ErrorContains(t, err, "is not fakepay state")
}

// TestWriteThenLoad: what write leaves is what loadState reads, and no temporary file stays.
func TestWriteThenLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	st, err := loadState("")
	require.NoError(t, err)
	c, refused := st.charge("key-1", chargeRequest{Amount: 100, Currency: "eur", Source: "tok_visa", Metadata: map[string]string{}}, false)
	require.Nil(t, refused)
	st.remember("key-1", "POST /v1/charges amount=100", http.StatusOK, []byte(`{"id":"`+c.ID+`"}`), time.Now())
	require.NoError(t, st.write(path))

	loaded, err := loadState(path)
	require.NoError(t, err)
	require.Equal(t, st.Instance, loaded.Instance)
	require.Equal(t, st.ledger(), loaded.ledger())
	require.Equal(t, st.Keys["key-1"].Body, loaded.Keys["key-1"].Body)
	left, err := filepath.Glob(filepath.Join(dir, ".fakepay-*"))
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestRecallForgetsAfterRetention: a stored response is kept for the retention and forgotten
// after it, for good.
func TestRecallForgetsAfterRetention(t *testing.T) {
	t.Parallel()
	st, err := loadState("")
	require.NoError(t, err)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st.remember("k", "req", http.StatusOK, []byte(`{}`), created)

	_, ok := st.recall("k", created.Add(RetentionDefault), RetentionDefault)
	require.True(t, ok, "forgotten at the end of its retention, not after it")
	_, ok = st.recall("k", created.Add(RetentionDefault+time.Nanosecond), RetentionDefault)
	require.False(t, ok, "kept after its retention")
	_, ok = st.recall("k", created, RetentionDefault)
	require.False(t, ok, "an expired response came back")
}

// TestRefundRefusals: each charge that cannot be refunded is refused with its own code and
// answered with Stripe's status, and the ledger is left as it was.
func TestRefundRefusals(t *testing.T) {
	t.Parallel()
	st, err := loadState("")
	require.NoError(t, err)
	charge := func(status string, refunded bool) string {
		c, refused := st.charge("c-"+status, chargeRequest{Amount: 1, Currency: "eur", Source: "tok_visa"}, false)
		require.Nil(t, refused)
		c.Status, c.Refunded = status, refunded
		return c.ID
	}
	for _, tc := range []struct {
		name, charge, code string
		status             int
	}{
		{"Missing", "ch_99999999", "resource_missing", http.StatusNotFound},
		{"AlreadyRefunded", charge("succeeded", true), "charge_already_refunded", http.StatusBadRequest},
		{"Processing", charge("processing", false), "charge_not_settled", http.StatusBadRequest},
		{"Failed", charge("failed", false), "charge_not_refundable", http.StatusBadRequest},
	} {
		rf, c, refused := st.refund("r-"+tc.name, tc.charge)
		require.Nil(t, rf, tc.name)
		require.Nil(t, c, tc.name)
		require.NotNil(t, refused, tc.name)
		require.Equal(t, tc.code, refused.code, tc.name)
		status, _ := refused.answer()
		require.Equal(t, tc.status, status, tc.name)
	}
	require.Empty(t, st.Refunds)

	_, refused := st.charge("declined", chargeRequest{Amount: 1, Currency: "eur", Source: "tok_chargeDeclined"}, false)
	status, _ := refused.answer()
	require.Equal(t, http.StatusPaymentRequired, status)
	require.Len(t, st.Charges, 3, "a declined charge is not recorded")
}
