package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/operator"
)

// sealedStore returns a store whose results Rot13Codec seals, with one result of Charge already
// recorded (its charge ID in it), an unknown outcome of Charge to resolve, the client with the
// workers' codecs, and one without them, as the tempotent command is.
func sealedStore(t *testing.T, ctx context.Context) (s *activity.Store, sealing, plain *operator.Client, c activity.Call, calls *int, schema string) {
	t.Helper()
	s, sealing, schema = setup(t, &activity.Config{Codecs: []converter.PayloadCodec{receipttest.Rot13Codec{}}})
	_, err := activity.Do(ctx, s, call(t, "order-0/charge", map[string]int{"amount": 5}),
		func(context.Context) (chargeResult, error) { return chargeResult{ChargeID: "ch_recorded"}, nil })
	require.NoError(t, err)
	c = call(t, "order-1/charge", map[string]int{"amount": 100})
	c.Lease = 20 * time.Millisecond
	calls = unknownOutcome(t, ctx, s, c)
	plain, err = operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema})
	require.NoError(t, err)
	return s, sealing, plain, c, calls, schema
}

// A client without the workers' codecs (the tempotent command) shows a sealed result as sealed,
// never decoded, and refuses to store an operator's result in cleartext beside sealed ones;
// "not applied" stores no result and is accepted. The client with the codecs resolves it
// sealed, and the next attempt replays it.
func TestResolveWithoutCodecsIsRefusedBesideSealedResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, sealing, plain, c, calls, schema := sealedStore(t, ctx)

	recorded, err := plain.Receipt(ctx, call(t, "order-0/charge", nil).Key.Token())
	require.NoError(t, err)
	require.Equal(t, "<"+receipttest.Rot13Encoding+", "+strconv.Itoa(len(recorded.Result.GetData()))+" bytes>", recorded.ResultText(),
		"a client without the codecs must show the sealed result as sealed")
	require.NotContains(t, recorded.ResultText(), "ch_recorded")

	_, err = plain.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: json.RawMessage(`{"charge_id":"ch_cleartext"}`),
		By: "ops", Reason: "the provider shows the charge"})
	require.ErrorIs(t, err, operator.ErrSealedResults)
	require.ErrorContains(t, err, receipttest.Rot13Encoding)
	r, err := sealing.Receipt(ctx, c.Key.Token())
	require.NoError(t, err)
	require.True(t, r.Unresolved, "a refused resolution changed the receipt")
	var stored []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT coalesce(string_agg(result, ''::bytea), '') FROM "+schema+".receipts").Scan(&stored))
	require.False(t, bytes.Contains(stored, []byte("ch_cleartext")))

	_, err = sealing.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: chargeResult{ChargeID: "ch_sealed"},
		By: "ops", Reason: "the provider shows the charge"})
	require.NoError(t, err)
	out, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) { *calls++; return chargeResult{}, nil })
	require.NoError(t, err)
	require.Equal(t, "ch_sealed", out.ChargeID)
	require.Equal(t, 1, *calls)
}

// "Not applied" records no result, so a client without the codecs may say it.
func TestResolveNotAppliedWithoutCodecsBesideSealedResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, plain, c, _, _ := sealedStore(t, ctx)
	r, err := plain.Resolve(ctx, c.Key.Token(), operator.Resolution{By: "ops", Reason: "the provider has no charge"})
	require.NoError(t, err)
	require.False(t, r.Unresolved)
}

// With no sealed result beside the receipt, a client without codecs resolves as before: plain
// results of the same operation do not refuse it.
func TestResolveWithoutCodecsBesidePlainResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, op, _ := setup(t, nil)
	_, err := activity.Do(ctx, s, call(t, "order-0/charge", map[string]int{"amount": 5}),
		func(context.Context) (chargeResult, error) { return chargeResult{ChargeID: "ch_plain"}, nil })
	require.NoError(t, err)
	c := call(t, "order-1/charge", map[string]int{"amount": 100})
	c.Lease = 20 * time.Millisecond
	unknownOutcome(t, ctx, s, c)
	_, err = op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: json.RawMessage(`{"charge_id":"ch_op"}`),
		By: "ops", Reason: "the provider shows the charge"})
	require.NoError(t, err)
}

// cents is a result type the workers' own payload converter writes, in an encoding of its own.
type cents int64

// centsConverter writes cents as "binary/cents", its decimal digits: an encoding no codec made.
type centsConverter struct{}

func (centsConverter) ToPayload(v any) (*commonpb.Payload, error) {
	c, ok := v.(cents)
	if !ok {
		return nil, nil
	}
	return &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/cents")}, Data: []byte(strconv.FormatInt(int64(c), 10))}, nil
}

func (centsConverter) FromPayload(p *commonpb.Payload, ptr any) error {
	n, err := strconv.ParseInt(string(p.GetData()), 10, 64)
	switch v := ptr.(type) {
	case *cents:
		*v = cents(n)
	case *any:
		*v = cents(n)
	default:
		return fmt.Errorf("binary/cents decodes into *cents, not %T", ptr)
	}
	return err
}

func (centsConverter) ToString(p *commonpb.Payload) string { return string(p.GetData()) }
func (centsConverter) Encoding() string                    { return "binary/cents" }

// A result in an encoding of the workers' own DataConverter is not sealed: the client, given
// that DataConverter and no codecs, reads it and resolves beside it.
func TestResolveWithoutCodecsBesideResultsOfACustomConverter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dc := converter.NewCompositeDataConverter(centsConverter{}, converter.NewJSONPayloadConverter())
	s, op, _ := setup(t, &activity.Config{DataConverter: dc})
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: op.Config().Schema, DataConverter: dc})
	require.NoError(t, err)
	_, err = activity.Do(ctx, s, call(t, "order-0/charge", 5), func(context.Context) (cents, error) { return 500, nil })
	require.NoError(t, err)
	c := call(t, "order-1/charge", 100)
	c.Lease = 20 * time.Millisecond
	calls := unknownOutcome(t, ctx, s, c)
	_, err = op.Resolve(ctx, c.Key.Token(), operator.Resolution{Applied: true, Result: cents(10000), By: "ops", Reason: "the provider shows it"})
	require.NoError(t, err)
	out, err := activity.Do(ctx, s, c, func(context.Context) (cents, error) { *calls++; return 0, nil })
	require.NoError(t, err)
	require.Equal(t, cents(10000), out)
}

// The operator prints a keyed fingerprint as keyed (k<version>:), as the workers recorded it.
func TestReceiptShowsAKeyedFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := []byte("a fingerprint key of 32 bytes!!!")
	s, op, _ := setup(t, &activity.Config{FingerprintKeys: [][]byte{key}})
	c := call(t, "order-0/charge", 5)
	_, err := activity.Do(ctx, s, c, func(context.Context) (chargeResult, error) { return chargeResult{}, nil })
	require.NoError(t, err)
	r, err := op.Receipt(ctx, c.Key.Token())
	require.NoError(t, err)
	require.Equal(t, c.Fingerprint.Keyed(key).String(), r.Fingerprint)
	require.Equal(t, "k1:", r.Fingerprint[:3])
}
