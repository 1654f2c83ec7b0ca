package activity_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
)

var (
	fpKey1 = []byte("first fingerprint key, 32 bytes!")
	fpKey2 = []byte("second fingerprint key, 32 bytes")
)

// keyedOn returns a store on schema whose fingerprints are keyed with ks (none: plain), as a
// worker restarted with another Config.FingerprintKeys is.
func keyedOn(t *testing.T, schema string, ks ...[]byte) *activity.Store {
	t.Helper()
	s, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema, FingerprintKeys: ks})
	require.NoError(t, err)
	return s
}

// payOn pays req under intent id on s, counting the calls in calls.
func payOn(ctx context.Context, s *activity.Store, id string, req Transfer2, calls *int) (int, error) {
	return activity.Do(ctx, s, activity.Call{Key: keys.Key{Namespace: "default", Operation: "Pay", ID: id}, Request: req,
		DownstreamDeduplicates: true}, func(context.Context) (int, error) { *calls++; return *calls, nil })
}

// storedFingerprint reads the fingerprint columns of intent id's receipt.
func storedFingerprint(t *testing.T, schema, id string) keys.Fingerprint {
	t.Helper()
	var fp keys.Fingerprint
	var sum []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT fingerprint_version, fingerprint FROM "+schema+".receipts WHERE id = $1", id).Scan(&fp.Version, &sum))
	copy(fp.Sum[:], sum)
	return fp
}

// A receipt recorded before the key was turned on replays after it, for a Call with Request and
// for one with only its (plain) Fingerprint; another request is still a mismatch that calls
// nothing.
func TestFingerprintKeyReplaysReceiptsRecordedBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain, schema := setup(t, nil)
	req := Transfer2{Seller: "s1", Amount: 10}
	calls := 0
	first, err := payOn(ctx, plain, "t-1", req, &calls)
	require.NoError(t, err)

	keyed := keyedOn(t, schema, fpKey1)
	again, err := payOn(ctx, keyed, "t-1", req, &calls)
	require.NoError(t, err, "a receipt recorded before the key was turned on is a mismatch after")
	require.Equal(t, first, again)
	fp, err := keys.FingerprintOf(req)
	require.NoError(t, err)
	again, err = activity.Do(ctx, keyed, activity.Call{Key: keys.Key{Namespace: "default", Operation: "Pay", ID: "t-1"}, Fingerprint: fp},
		func(context.Context) (int, error) { calls++; return calls, nil })
	require.NoError(t, err, "a plain Call.Fingerprint does not match its plain receipt on a keyed store")
	require.Equal(t, first, again)

	_, err = payOn(ctx, keyed, "t-1", Transfer2{Seller: "s1", Amount: 11}, &calls)
	require.ErrorAs(t, err, new(*activity.MismatchError))
	require.Equal(t, 1, calls)
	require.Equal(t, fp.String(), storedFingerprint(t, schema, "t-1").String(), "a replay rewrote the receipt's fingerprint")

	// A receipt an older release recorded under fingerprint version 1 (Tags null, where version 2
	// counts it as []) is compared under version 1, keyed store or not.
	v1, err := keys.FingerprintAt(req, 1)
	require.NoError(t, err)
	require.NotEqual(t, v1.Sum, fp.Sum)
	older, err := activity.Do(ctx, plain, activity.Call{Key: keys.Key{Namespace: "default", Operation: "Pay", ID: "t-1v1"}, Fingerprint: v1},
		func(context.Context) (int, error) { calls++; return calls, nil })
	require.NoError(t, err)
	again, err = payOn(ctx, keyed, "t-1v1", req, &calls)
	require.NoError(t, err, "a version-1 receipt recorded before the key is a mismatch after")
	require.Equal(t, older, again)
	require.Equal(t, 2, calls)
}

// A keyed store records the keyed fingerprint (k<version>:), not the plain hash, matches it on
// replay, and still tells another request apart. A store without the key cannot match it, and
// calls nothing.
func TestFingerprintKeyIsWhatTheReceiptStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := setup(t, nil)
	keyed := keyedOn(t, schema, fpKey1)
	req := Transfer2{Seller: "s1", Amount: 10}
	calls := 0
	first, err := payOn(ctx, keyed, "t-2", req, &calls)
	require.NoError(t, err)

	plainFP, err := keys.FingerprintOf(req)
	require.NoError(t, err)
	stored := storedFingerprint(t, schema, "t-2")
	require.NotEqual(t, plainFP.Sum, stored.Sum, "the receipt stores the plain hash of the request")
	require.True(t, stored.IsKeyed())
	require.Equal(t, plainFP.Keyed(fpKey1).String(), stored.String())
	require.Equal(t, "k", stored.String()[:1])

	again, err := payOn(ctx, keyed, "t-2", req, &calls)
	require.NoError(t, err)
	require.Equal(t, first, again)
	_, err = payOn(ctx, keyed, "t-2", Transfer2{Seller: "s1", Amount: 11}, &calls)
	var mismatch *activity.MismatchError
	require.ErrorAs(t, err, &mismatch)
	require.ErrorContains(t, err, "Config.FingerprintKeys")
	_, err = payOn(ctx, keyedOn(t, schema), "t-2", req, &calls)
	require.ErrorAs(t, err, &mismatch, "a store without the key matched a keyed receipt")
	require.Equal(t, 1, calls)
}

// Rotation: the first key signs, every key verifies. Dropping a key leaves its receipts
// unmatched (refused, nothing called), so keep every key of the retention.
func TestFingerprintKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := setup(t, nil)
	req := Transfer2{Seller: "s1", Amount: 10}
	calls := 0
	underOld, err := payOn(ctx, keyedOn(t, schema, fpKey1), "t-3", req, &calls)
	require.NoError(t, err)

	rotated := keyedOn(t, schema, fpKey2, fpKey1)
	again, err := payOn(ctx, rotated, "t-3", req, &calls)
	require.NoError(t, err, "a receipt keyed with the older key is a mismatch after rotation")
	require.Equal(t, underOld, again)
	underNew, err := payOn(ctx, rotated, "t-4", req, &calls)
	require.NoError(t, err)
	plainFP, err := keys.FingerprintOf(req)
	require.NoError(t, err)
	require.Equal(t, plainFP.Keyed(fpKey2).String(), storedFingerprint(t, schema, "t-4").String(), "the first key must sign")
	_, err = payOn(ctx, rotated, "t-3", Transfer2{Seller: "s1", Amount: 11}, &calls)
	require.ErrorAs(t, err, new(*activity.MismatchError))

	newOnly := keyedOn(t, schema, fpKey2)
	again, err = payOn(ctx, newOnly, "t-4", req, &calls)
	require.NoError(t, err)
	require.Equal(t, underNew, again)
	_, err = payOn(ctx, newOnly, "t-3", req, &calls)
	require.ErrorAs(t, err, new(*activity.MismatchError), "a dropped key still matched")
	require.Equal(t, 2, calls)
}

// An attempt that takes over a receipt recorded before the key was turned on completes it: it
// records its result under the fingerprint the receipt was recorded with.
func TestFingerprintKeyTakeoverOfAReceiptRecordedBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain, schema := setup(t, nil)
	c := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Pay", ID: "t-5"}, Request: Transfer2{Seller: "s1", Amount: 10},
		DownstreamDeduplicates: true, Lease: 20 * time.Millisecond}
	calls := 0
	receipttest.CrashAfterEffect(ctx, plain, c, func(keys.Token) { calls++ })

	keyed := keyedOn(t, schema, fpKey1)
	out, err := receipttest.DoUntilDone(ctx, keyed, c, func(context.Context) (int, error) { calls++; return calls, nil })
	require.NoError(t, err)
	require.Equal(t, 2, out)
	var state string
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT state FROM "+schema+".receipts WHERE id = 't-5'").Scan(&state))
	require.Equal(t, "completed", state, "the takeover's completion did not match the receipt")
	c.Lease = 0
	again, err := activity.Do(ctx, keyed, c, func(context.Context) (int, error) { calls++; return calls, nil })
	require.NoError(t, err)
	require.Equal(t, 2, again)
}

// A key too short to hide anything, or given twice, is refused before anything connects.
func TestFingerprintKeysAreValidated(t *testing.T) {
	t.Parallel()
	_, err := activity.NewStore(pgtest.Pool(t), &activity.Config{FingerprintKeys: [][]byte{[]byte("short")}})
	require.ErrorContains(t, err, "Config.FingerprintKeys[0] is 5 bytes")
	_, err = activity.NewStore(pgtest.Pool(t), &activity.Config{FingerprintKeys: [][]byte{fpKey1, fpKey2, fpKey1}})
	require.ErrorContains(t, err, "Config.FingerprintKeys[2] repeats Config.FingerprintKeys[0]")
}

// The transactional path (DoInNewTx) keys what it records, and replays a receipt recorded
// before the key was turned on.
func TestFingerprintKeyInNewTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain, schema := setup(t, nil)
	req := Transfer2{Seller: "s1", Amount: 10}
	calls := 0
	inTx := func(s *activity.Store, id string) (int, error) {
		return activity.DoInNewTx(ctx, s, activity.Call{Key: keys.Key{Namespace: "default", Operation: "Pay", ID: id}, Request: req},
			func(context.Context, pgx.Tx) (int, error) { calls++; return calls, nil })
	}
	first, err := inTx(plain, "tx-1")
	require.NoError(t, err)
	keyed := keyedOn(t, schema, fpKey1)
	again, err := inTx(keyed, "tx-1")
	require.NoError(t, err)
	require.Equal(t, first, again)
	_, err = inTx(keyed, "tx-2")
	require.NoError(t, err)
	require.True(t, storedFingerprint(t, schema, "tx-2").IsKeyed(), "DoInNewTx recorded a plain fingerprint on a keyed store")
	_, err = inTx(keyed, "tx-2")
	require.NoError(t, err)
	require.Equal(t, 2, calls)
}
