package payment_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/samples/payment"
)

// The charge ledger keeps each charge's status from the newest of the provider's events: a
// charge.succeeded that arrives after the charge's charge.refunded is acknowledged and skipped
// (noted as stale), a redelivery of an event is absorbed by the inbox, and an event of another
// charge is not held back by it.
func TestChargeLedgerAppliesOnlyNewerEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	require.NoError(t, migrate.Up(ctx, pool, schema))
	require.NoError(t, payment.Migrate(ctx, pool))
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	edge, err := payment.Edge(pool, out, "whsec_ledger_test")
	require.NoError(t, err)
	srv := httptest.NewServer(edge)
	t.Cleanup(srv.Close)

	var b [6]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:]) // the sample's tables are shared: this test's charges are its own
	charge, other, order := "ch_"+run, "ch_other_"+run, "order-"+run
	deliver := func(eventID, typ, chargeID string) {
		t.Helper()
		body := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":1700000000,"data":{"object":{"id":%q,"description":%q}}}`,
			eventID, typ, chargeID, order)
		req, err := http.NewRequest(http.MethodPost, srv.URL+payment.PathCharges, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s %s", eventID, typ)
	}
	status := func(chargeID string) (s string) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM payment_sample.charges WHERE order_id = $1 AND charge_id = $2", order, chargeID).Scan(&s))
		return s
	}
	count := func(table string) (n int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM payment_sample."+table+" WHERE order_id = $1", order).Scan(&n))
		return n
	}

	deliver("evt_2", "charge.refunded", charge)
	require.Equal(t, "refunded", status(charge))
	deliver("evt_1", "charge.succeeded", charge) // older, arrives last
	require.Equal(t, "refunded", status(charge), "a late charge.succeeded undid the refund")
	require.Equal(t, 1, count("stale_events"))
	deliver("evt_2", "charge.refunded", charge) // the outbox delivers it again
	require.Equal(t, 1, count("duplicates"), "the redelivery was not absorbed by the inbox")
	require.Equal(t, 1, count("stale_events"))
	deliver("evt_3", "charge.succeeded", other)
	require.Equal(t, "succeeded", status(other))
	require.Equal(t, 1, count("stale_events"))
}
