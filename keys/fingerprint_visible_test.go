package keys

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Request types for TestIntentTagOnAFieldJSONDropsIsRefused: each puts an intent tag on a field
// that encoding/json drops from the JSON it writes.
type (
	// refundDetails.Amount is shadowed in refund by refund.Amount, which is shallower.
	refundDetails struct {
		Amount int `tempotent:"intent"`
		Reason string
	}
	refund struct {
		refundDetails
		Order  string
		Amount int
	}
	// shadowedOnlyIntent has no encoded intent field: everything would be left out.
	shadowedOnlyIntent struct {
		refundDetails
		Amount int
	}
	// conflictLeft.Amount and conflictRight.Amount are promoted to the same depth without JSON
	// names, so encoding/json drops both.
	conflictLeft struct {
		Amount int `tempotent:"intent"`
	}
	conflictRight struct {
		Amount int
	}
	conflicting struct {
		conflictLeft
		conflictRight
		Order string `tempotent:"intent"`
	}
	// namedWins: at the same depth, a field whose name comes from a json tag wins over one
	// without.
	namedWinsLeft struct {
		Amount int `tempotent:"intent"`
	}
	namedWinsRight struct {
		Total int `json:"Amount"`
	}
	namedWins struct {
		namedWinsLeft
		namedWinsRight
	}
	// embeddedTwice promotes Audit twice at the same depth (through two structs): encoding/json
	// drops Audit's fields, so the intent tag on the embedding in viaB brings nothing.
	viaA struct{ Audit }
	viaB struct {
		Audit `tempotent:"intent"`
	}
	embeddedTwice struct {
		viaA
		viaB
		Amount int
	}
	// promotedShallower: Audit is promoted at depth 1, so encoding/json does not explore it again
	// through viaB, whose intent tag on it brings nothing; Audit's fields are encoded, untagged.
	promotedShallower struct {
		Audit
		viaB
		Amount int
	}
	// diamond is valid: intentAudit is promoted at depth 1 and again through viaC, which
	// encoding/json does not read; the tag on intentAudit.By is honoured where By is encoded.
	intentAudit struct {
		By string `tempotent:"intent"`
		At int
	}
	viaC struct{ intentAudit }
	viaD struct{ intentAudit }
	// leafPromotedTwice promotes intentAudit through viaC and viaD at one depth: By conflicts
	// with its own copy.
	leafPromotedTwice struct {
		viaC
		viaD
	}
	// shadowedByConflict: the depth-2 Amounts conflict, and shadow the depth-3 one.
	deepAmount         struct{ refundDetails }
	shadowedByConflict struct {
		conflictLeft2
		conflictRight
		deepAmount
	}
	conflictLeft2 struct{ Amount int }
	// embeddingAllShadowed: every field Audit promotes is shadowed.
	embeddingAllShadowed struct {
		Audit `tempotent:"intent"`
		By    string
		At    time.Time
	}
	// readElsewhereAllShadowed: Audit is read at depth 1 and its fields are shadowed there too.
	readElsewhereAllShadowed struct {
		Audit
		viaB
		By string
		At time.Time
	}
	// prunedFirst reaches conflictLeft.Amount first through viaLeft, a copy encoding/json never
	// reads; the error explains the copy it reads, at depth 1.
	viaLeft     struct{ conflictLeft }
	prunedFirst struct {
		viaLeft
		conflictLeft
		conflictRight
	}
	// invalidName's json tag name is one encoding/json does not accept, so the field keeps its
	// Go name, Amount, and conflicts with conflictLeft.Amount.
	invalidName struct {
		//lint:ignore SA5008 a json name encoding/json refuses, on purpose
		Amount int `json:"amo'unt"`
	}
	invalidNameConflict struct {
		conflictLeft
		invalidName
	}
	//lint:ignore U1000 a struct with no field encoding/json encodes, on purpose
	onlyUnexported struct{ n int }
	// embeddingOfNothing promotes no field at all.
	embeddingOfNothing struct {
		//lint:ignore U1000 only its type is read, by reflection
		onlyUnexported `tempotent:"intent"`
		Amount         int
	}
	// embeddedPointerToUnexported is valid: encoding/json encodes the fields promoted from an
	// embedded pointer to an unexported struct.
	embeddedPointerToUnexported struct {
		*refundDetails `tempotent:"intent"`
		Order          string
	}
	diamond struct {
		intentAudit
		viaC
		Amount int
	}
	// orderBase has no tags: the embeddings below bring it into an intent.
	orderBase struct {
		Order  string
		Amount int
	}
	// baseRefund's intent tag on orderBase covers orderBase.Amount, which the shallower
	// baseRefund.Amount shadows; baseRefund.Amount is not part of the intent.
	baseRefund struct {
		orderBase `tempotent:"intent"`
		Amount    int
	}
	// baseRefundIntentWins is valid: the field that encoding/json writes as Amount is part of
	// the intent.
	baseRefundIntentWins struct {
		orderBase `tempotent:"intent"`
		Amount    int `tempotent:"intent"`
	}
	// intentOrderBase is an intent embedding one level down: in deepBaseRefund, orderBase.Amount
	// is at depth 3 and shadowed by deepBaseRefund.Amount.
	intentOrderBase struct {
		orderBase `tempotent:"intent"`
		Note      string
	}
	deepBaseRefund struct {
		intentOrderBase
		Amount int
	}
	// wrappedOrderBase is tagged intent where it is embedded, in wrappedBaseRefund, and covers
	// orderBase two levels down.
	wrappedOrderBase  struct{ orderBase }
	wrappedBaseRefund struct {
		wrappedOrderBase `tempotent:"intent"`
		Amount           int
	}
	// baseRefundExcluded's Amount is left out explicitly, and shadows the Amount the intent covers.
	baseRefundExcluded struct {
		orderBase `tempotent:"intent"`
		Amount    int `tempotent:"-"`
	}
	// namedAmount's Total is named Amount by a json tag: at the same depth as orderBase.Amount, it
	// wins.
	namedAmount struct {
		Total int `json:"Amount"`
	}
	baseRefundOutranked struct {
		orderBase `tempotent:"intent"`
		namedAmount
	}
	// intentViaNote brings orderBase into the intent, but encoding/json reads orderBase once per
	// object: in baseReadElsewhere, through the untagged baseReadElsewhere.orderBase.
	intentViaNote struct {
		orderBase
		Note string
	}
	baseReadElsewhere struct {
		orderBase
		intentViaNote `tempotent:"intent"`
	}
	// amountOnly's Amount conflicts with orderBase.Amount in baseRefundConflict: encoding/json
	// drops both, so no Amount is in the JSON, and the fingerprint misses nothing the JSON has.
	amountOnly         struct{ Amount int }
	baseRefundConflict struct {
		orderBase `tempotent:"intent"`
		amountOnly
	}
)

// TestIntentTagOnAFieldJSONDropsIsRefused checks that an intent tag on a promoted field that
// encoding/json drops (shadowed by a shallower field, in conflict with another at the same depth,
// or outranked by a json-named one) is an error that names the field and why, instead of putting
// the struct in intent mode: that left out every field encoding/json does encode, so refunds of
// 100 and 400 for one order shared a fingerprint.
func TestIntentTagOnAFieldJSONDropsIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		v     any
		wants []string
	}{
		{"ShadowedByShallower", shadowedOnlyIntent{Amount: 100}, []string{"refundDetails.Amount", `"Amount"`, "shadowedOnlyIntent.refundDetails.Amount", "shallower field keys.shadowedOnlyIntent.Amount", "move the intent tag"}},
		{"ConflictAtSameDepth", conflicting{Order: "o"}, []string{"conflictLeft.Amount", "in conflict with keys.conflicting.conflictRight.Amount", "drops both", "move the intent tag"}},
		{"JSONNameWinsAtSameDepth", namedWins{}, []string{"namedWinsLeft.Amount", "keys.namedWins.namedWinsRight.Total", "json tag"}},
		{"EmbeddingPromotedTwice", embeddedTwice{}, []string{"viaB.Audit", "embedded struct", "more than once at this depth", "keys.embeddedTwice.viaA.Audit"}},
		{"EmbeddingPromotedShallower", promotedShallower{}, []string{"viaB.Audit", "embedded struct", "once per object, through keys.promotedShallower.Audit,"}},
		{"LeafPromotedTwice", leafPromotedTwice{}, []string{"intentAudit.By", "more than once at the same depth", "drops every copy"}},
		{"ShadowedByConflictingShallower", shadowedByConflict{}, []string{"refundDetails.Amount", "keys.shadowedByConflict.conflictLeft2.Amount and keys.shadowedByConflict.conflictRight.Amount", "shadow it"}},
		{"EmbeddingAllShadowed", embeddingAllShadowed{}, []string{"keys.embeddingAllShadowed.Audit", "none of the fields promoted through keys.embeddingAllShadowed.Audit", "keys.embeddingAllShadowed.Audit.By", "shallower field keys.embeddingAllShadowed.By"}},
		{"EmbeddingReadElsewhereAllShadowed", readElsewhereAllShadowed{}, []string{"keys.viaB.Audit", "through keys.readElsewhereAllShadowed.Audit,", "none of the fields promoted through keys.readElsewhereAllShadowed.Audit"}},
		{"EmbeddingOfNothing", embeddingOfNothing{}, []string{"keys.embeddingOfNothing.onlyUnexported", "promotes no field that encoding/json encodes"}},
		{"ExplainsTheCopyJSONReads", prunedFirst{}, []string{"does not encode keys.prunedFirst.conflictLeft.Amount in", "in conflict with keys.prunedFirst.conflictRight.Amount"}},
		{"InvalidJSONNameIsIgnored", invalidNameConflict{}, []string{"conflictLeft.Amount", "in conflict with keys.invalidNameConflict.invalidName.Amount"}},
		{"BehindNilPointer", struct{ R *refund }{}, []string{"refundDetails.Amount", "shadows it"}},
		{"InSliceElement", []conflicting{}, []string{"conflictLeft.Amount"}},
		{"IntentEmbeddingOneLevelDown", deepBaseRefund{Amount: 100}, []string{"field keys.intentOrderBase.orderBase has tag", "keys.deepBaseRefund.intentOrderBase.orderBase.Amount", "shallower field keys.deepBaseRefund.Amount", "tag keys.deepBaseRefund.Amount"}},
		{"IntentEmbeddingCoversTwoLevelsDown", wrappedBaseRefund{Amount: 100}, []string{"field keys.wrappedBaseRefund.wrappedOrderBase has tag", "keys.wrappedBaseRefund.wrappedOrderBase.orderBase.Amount", "shallower field keys.wrappedBaseRefund.Amount"}},
		{"WinnerLeftOut", baseRefundExcluded{Amount: 100}, []string{"keys.baseRefundExcluded.orderBase.Amount", "keys.baseRefundExcluded.Amount", "not part of the intent"}},
		{"WinnerByJSONName", baseRefundOutranked{}, []string{"keys.baseRefundOutranked.orderBase.Amount", "keys.baseRefundOutranked.namedAmount.Total", "json tag", "not part of the intent"}},
		{"EmbeddingReadElsewhere", baseReadElsewhere{}, []string{"field keys.baseReadElsewhere.intentViaNote has tag", "keys.baseReadElsewhere.intentViaNote.orderBase.Order", "through keys.baseReadElsewhere.orderBase, not through keys.baseReadElsewhere.intentViaNote.orderBase", "not part of the intent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FingerprintOf(tc.v)
			require.ErrorIs(t, err, ErrNotCanonicalizable)
			for _, want := range tc.wants {
				require.ErrorContains(t, err, want)
			}
		})
	}

	t.Run("Refund", func(t *testing.T) {
		t.Parallel()
		// Go's selector r.Amount and encoding/json both mean refund.Amount; the intent tag is on
		// the shadowed refundDetails.Amount. Two different refunds must not share a fingerprint.
		small, errSmall := FingerprintOf(refund{Order: "o-1", Amount: 100})
		large, errLarge := FingerprintOf(refund{Order: "o-1", Amount: 400})
		if errSmall == nil && errLarge == nil {
			require.False(t, small.Matches(large), "refunds of 100 and 400 for one order share the fingerprint %s", small)
		}
		require.ErrorIs(t, errSmall, ErrNotCanonicalizable)
		require.ErrorContains(t, errSmall, "refundDetails.Amount")
		require.ErrorContains(t, errSmall, "keys.refund.Amount")
	})

	t.Run("IntentEmbeddingShadowedByNonIntent", func(t *testing.T) {
		t.Parallel()
		// encoding/json writes baseRefund.Amount, which the intent leaves out; the tag covers
		// orderBase.Amount, which encoding/json drops. Two different refunds must not share a
		// fingerprint.
		small, errSmall := FingerprintOf(baseRefund{orderBase: orderBase{Order: "o-1"}, Amount: 100})
		large, errLarge := FingerprintOf(baseRefund{orderBase: orderBase{Order: "o-1"}, Amount: 400})
		if errSmall == nil && errLarge == nil {
			require.False(t, small.Matches(large), "refunds of 100 and 400 for one order share the fingerprint %s", small)
		}
		require.ErrorIs(t, errSmall, ErrNotCanonicalizable)
		for _, want := range []string{
			`field keys.baseRefund.orderBase has tag tempotent:"intent"`, // the embedding
			"keys.baseRefund.orderBase.Amount",                           // the dropped field
			"shallower field keys.baseRefund.Amount",                     // the field that wins
			"not part of the intent",
			`tag keys.baseRefund.Amount tempotent:"intent"`, "give the fields different JSON names", // what to do
		} {
			require.ErrorContains(t, errSmall, want)
		}
	})

	t.Run("IntentEmbeddingShadowedByIntent", func(t *testing.T) {
		t.Parallel()
		// The field encoding/json writes as Amount is part of the intent: the fingerprint covers
		// what the JSON shows.
		small, err := FingerprintOf(baseRefundIntentWins{orderBase: orderBase{Order: "o-1", Amount: 7}, Amount: 100})
		require.NoError(t, err)
		large, err := FingerprintOf(baseRefundIntentWins{orderBase: orderBase{Order: "o-1", Amount: 7}, Amount: 400})
		require.NoError(t, err)
		other, err := FingerprintOf(baseRefundIntentWins{orderBase: orderBase{Order: "o-2", Amount: 7}, Amount: 100})
		require.NoError(t, err)
		require.False(t, small.Matches(large), "Amount counts")
		require.False(t, small.Matches(other), "Order counts")
	})

	t.Run("IntentEmbeddingInConflictIsAccepted", func(t *testing.T) {
		t.Parallel()
		// encoding/json drops orderBase.Amount and amountOnly.Amount, so the JSON has no Amount and
		// the fingerprint misses nothing it shows. The struct is accepted, as it was before.
		a, err := FingerprintOf(baseRefundConflict{orderBase{"o-1", 100}, amountOnly{1}})
		require.NoError(t, err)
		b, err := FingerprintOf(baseRefundConflict{orderBase{"o-1", 400}, amountOnly{2}})
		require.NoError(t, err)
		c, err := FingerprintOf(baseRefundConflict{orderBase{"o-2", 100}, amountOnly{1}})
		require.NoError(t, err)
		require.True(t, a.Matches(b), "encoding/json writes no Amount")
		require.False(t, a.Matches(c), "Order counts")
	})

	t.Run("EmbeddedPointerToUnexportedStruct", func(t *testing.T) {
		t.Parallel()
		a, err := FingerprintOf(embeddedPointerToUnexported{&refundDetails{Amount: 100, Reason: "a"}, "o"})
		require.NoError(t, err)
		b, err := FingerprintOf(embeddedPointerToUnexported{&refundDetails{Amount: 400, Reason: "a"}, "o"})
		require.NoError(t, err)
		require.False(t, a.Matches(b), "Amount counts")
	})

	t.Run("EncodedCopyHonoursTheTag", func(t *testing.T) {
		t.Parallel()
		// intentAudit is promoted at depth 1 and again, never read, through viaC: its tag counts.
		a, err := FingerprintOf(diamond{intentAudit: intentAudit{By: "a", At: 1}, Amount: 1})
		require.NoError(t, err)
		b, err := FingerprintOf(diamond{intentAudit: intentAudit{By: "a", At: 2}, Amount: 2})
		require.NoError(t, err)
		c, err := FingerprintOf(diamond{intentAudit: intentAudit{By: "b"}})
		require.NoError(t, err)
		require.True(t, a.Matches(b), "only By counts")
		require.False(t, a.Matches(c), "By counts")
	})
}
