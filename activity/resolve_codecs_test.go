package activity_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// An operator's result is a stored result like any other: Resolve seals it with Config.Codecs,
// so it is not cleartext at rest, and the next attempt replays it decoded.
func TestResolveSealsTheResultWithCodecs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{Codecs: []converter.PayloadCodec{rot13Codec{}}})
	c := call(t, "order-1/charge", map[string]int{"amount": 100})
	c.Lease = 20 * time.Millisecond
	calls := unknownOutcome(t, ctx, s, c)

	const secret = "ch_secret_resolved"
	got, err := s.Resolve(ctx, c.Key.Token(), activity.Resolution{Applied: true, Result: chargeResult{ChargeID: secret},
		By: "ops", Reason: "the provider shows the charge"})
	require.NoError(t, err)
	require.JSONEq(t, `{"charge_id":"`+secret+`","token":""}`, got.ResultText(), "Receipt did not open the resolved result")

	var stored []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT result FROM "+schema+".receipts").Scan(&stored))
	require.NotEmpty(t, stored)
	require.False(t, bytes.Contains(stored, []byte(secret)), "the resolved result is stored in cleartext, not sealed by Config.Codecs")

	out, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) { *calls++; return chargeResult{}, nil })
	require.NoError(t, err)
	require.Equal(t, chargeResult{ChargeID: secret}, out, "the next attempt did not replay the resolved result")
	require.Equal(t, 1, *calls)
}
