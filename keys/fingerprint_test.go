package keys

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"b":1,"a":{"d":[3,2,{"z":null,"y":true}],"c":"x"}}`, `{"a":{"c":"x","d":[3,2,{"y":true,"z":null}]},"b":1}`},
		{" {\n \"a\" : [ 1 , 2 ] } ", `{"a":[1,2]}`},
		{`1.0`, `1`},
		{`1.50`, `15e-1`},
		{`100`, `1e2`},
		{`-0.0`, `0`},
		{`1E+2`, `1e2`},
		{`0.001`, `1e-3`},
		{`12345678901234567890123`, `12345678901234567890123`},
		{`"<a&b>"`, `"<a&b>"`},
		{`"\u00e9"`, `"é"`},
		{`{"é":1,"e":2,"z":3}`, `{"e":2,"z":3,"é":1}`},
	} {
		got, err := canonicalize([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, string(got), tc.in)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, "\"\xff\"", `{"a":`, `1 2`, ``} {
		_, err := canonicalize([]byte(bad))
		require.ErrorIs(t, err, ErrNotCanonicalizable, bad)
	}
}

// TestCanonicalizeExponentBounds checks that a number whose exponent cannot be represented is
// refused rather than wrapped: 1.5e-9223372036854775808 and 15e9223372036854775807 are far
// apart, and an exponent computed in wrapping arithmetic gave both the same canonical form.
func TestCanonicalizeExponentBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string // want "" means refused
	}{
		{"LargestExponent", `1e2147483647`, `1e2147483647`},
		{"SmallestExponent", `1e-2147483648`, `1e-2147483648`},
		{"PlusSignAndLeadingZeros", `1e+0002`, `1e2`},
		{"FractionShiftsWithinRange", `0.1e2147483647`, `1e2147483646`},
		{"TrailingZerosShiftWithinRange", `100e-2147483648`, `1e-2147483646`},
		{"ExponentBeyondInt32", `1e2147483648`, ``},
		{"ExponentBelowInt32", `1e-2147483649`, ``},
		{"CanonicalExponentBeyondInt32", `10e2147483647`, ``},
		{"CanonicalExponentBelowInt32", `0.1e-2147483648`, ``},
		{"WrapsAtMinInt64", `1.5e-9223372036854775808`, ``},
		{"MaxInt64", `15e9223372036854775807`, ``},
		{"BeyondInt64", `1e99999999999999999999`, ``},
		{"ZeroWithHugeExponent", `0e99999999999`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := canonicalize([]byte(tc.in))
			if tc.want == "" {
				require.ErrorIs(t, err, ErrNotCanonicalizable, "accepted as %s", got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			again, err := canonicalize(got)
			require.NoError(t, err, "the canonical form is refused")
			require.Equal(t, string(got), string(again))
		})
	}
}

// TestCanonicalNumbersDistinct checks both halves of "one form per value": spellings of one
// value share a form, and different values never do, however large their exponents.
func TestCanonicalNumbersDistinct(t *testing.T) {
	t.Parallel()
	for _, same := range [][]string{
		{`1`, `1.0`, `10e-1`, `0.1e1`, `1E0`, `1e+0`, `100e-2`},
		{`-25e2147483645`, `-2.5e2147483646`, `-0.25e2147483647`},
		{`0`, `-0`, `0.000`, `0e5`, `-0e-5`},
	} {
		want, err := canonicalize([]byte(same[0]))
		require.NoError(t, err)
		for _, s := range same[1:] {
			got, err := canonicalize([]byte(s))
			require.NoError(t, err, s)
			require.Equal(t, string(want), string(got), "%s and %s", same[0], s)
		}
	}
	seen := map[string]string{}
	for _, n := range []string{
		`1`, `-1`, `10`, `0.1`, `15`, `1.5`, `15e2147483646`, `1.5e2147483646`, `15e-2147483647`,
		`1.5e-2147483647`, `1e2147483647`, `1e-2147483648`, `0`, `12345678901234567890123`,
		`12345678901234567890124`, `1.5e-9223372036854775808`, `15e9223372036854775807`,
		`1e9223372036854775807`, `1e-9223372036854775808`,
	} {
		got, err := canonicalize([]byte(n))
		if err != nil {
			require.ErrorIs(t, err, ErrNotCanonicalizable, n)
			continue
		}
		other, dup := seen[string(got)]
		require.False(t, dup, "%s and %s share the canonical form %s", other, n, got)
		seen[string(got)] = n
	}
}

// TestCanonicalizeSurrogateEscapes checks that a string with an unpaired surrogate escape is
// refused: encoding/json decodes every one of them to U+FFFD, so "\ud800", "\udfff" and
// "\ufffd" would be one request. Paired escapes are the character they spell.
func TestCanonicalizeSurrogateEscapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string // want "" means refused
	}{
		{"Pair", `"\ud83d\ude00"`, `"😀"`},
		{"PairUpperCase", `"\uD83D\uDE00"`, `"😀"`},
		{"PairInName", `{"\ud83d\ude00":1}`, `{"😀":1}`},
		{"FirstPair", `"\ud800\udc00"`, "\"\U00010000\""},
		{"LastPair", `"\udbff\udfff"`, "\"\U0010FFFF\""},
		{"ReplacementCharacter", `"\ufffd"`, "\"\uFFFD\""},
		{"EscapedBackslashBeforeU", `"\\ud800"`, `"\\ud800"`},
		{"HighAlone", `"\ud800"`, ``},
		{"LowAlone", `"\udfff"`, ``},
		{"HighAtEnd", `"a\ud83d"`, ``},
		{"HighThenText", `"\ud83dx"`, ``},
		{"HighThenHigh", `"\ud83d\ud83d"`, ``},
		{"HighThenOtherEscape", `"\ud83d\u0041"`, ``},
		{"HighThenNewlineEscape", `"\ud83d\n"`, ``},
		{"LowThenHigh", `"\ude00\ud83d"`, ``},
		{"PairThenLow", `"\ud83d\ude00\ude00"`, ``},
		{"LoneInName", `{"\ud800":1}`, ``},
		{"LoneInNestedValue", `{"a":[1,{"b":"x\udc00y"}]}`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := canonicalize([]byte(tc.in))
			if tc.want == "" {
				require.ErrorIs(t, err, ErrNotCanonicalizable, "accepted as %s", got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
	// The three spellings that encoding/json decodes alike: only the legal one is accepted.
	a, err := FingerprintJSON([]byte(`{"name":"\ufffd"}`))
	require.NoError(t, err)
	b, err := FingerprintJSON([]byte("{\"name\":\"\uFFFD\"}"))
	require.NoError(t, err)
	require.Equal(t, a, b, "the escape and the literal U+FFFD are one string")
	for _, lone := range []string{`{"name":"\ud800"}`, `{"name":"\udfff"}`} {
		_, err := FingerprintJSON([]byte(lone))
		require.ErrorIs(t, err, ErrNotCanonicalizable, lone)
	}
	escaped, err := FingerprintJSON([]byte(`{"name":"\ud83d\ude00"}`))
	require.NoError(t, err)
	literal, err := FingerprintJSON([]byte(`{"name":"😀"}`))
	require.NoError(t, err)
	require.Equal(t, literal, escaped, "a paired escape is the character it spells")
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a, err := FingerprintJSON([]byte(`{"amount":100,"currency":"eur","meta":{"a":1,"b":2}}`))
	require.NoError(t, err)
	b, err := FingerprintJSON([]byte(`{"meta":{"b":2,"a":1.0},"currency":"eur","amount":1e2}`))
	require.NoError(t, err)
	require.Equal(t, a, b, "reordered keys and another spelling of the same number are the same request")
	require.Equal(t, int16(1), a.Version, "JSON carries no Go types, so it is always version 1")

	for _, other := range []string{
		`{"amount":101,"currency":"eur","meta":{"a":1,"b":2}}`,
		`{"amount":100,"currency":"EUR","meta":{"a":1,"b":2}}`,
		`{"amount":100,"currency":"eur","meta":{"a":1,"b":3}}`,
		`{"amount":"100","currency":"eur","meta":{"a":1,"b":2}}`,
		`{"amount":100,"currency":"eur","meta":{"a":1,"b":2},"x":null}`,
	} {
		c, err := FingerprintJSON([]byte(other))
		require.NoError(t, err)
		require.NotEqual(t, a, c, other)
	}
	// No Unicode normalisation: NFC and NFD spellings are different requests.
	nfc, _ := FingerprintOf(map[string]string{"name": "café"})
	nfd, _ := FingerprintOf(map[string]string{"name": "cafe\u0301"})
	require.NotEqual(t, nfc, nfd)

	type order struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
	s, err := FingerprintOf(order{Amount: 100, Currency: "eur"})
	require.NoError(t, err)
	j, err := FingerprintJSON([]byte(`{"currency":"eur","amount":100}`))
	require.NoError(t, err)
	require.Equal(t, s, j)

	_, err = FingerprintOf(make(chan int))
	require.ErrorIs(t, err, ErrNotCanonicalizable)
}

// FuzzCanonicalize checks the canonical form's two properties on any input it accepts: it is a
// fixed point (canonicalising it again changes nothing), and another spelling of the same value
// (here, the same document indented) has the same form. The seeds include the inputs that once
// collided: wrapping exponents and unpaired surrogate escapes, which are refused.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1.0,2e3,"x"]}`, `-0.5e-7`, `[{"a":{"b":null}}]`, `"\u2028"`,
		`1.5e-9223372036854775808`, `15e9223372036854775807`, `1e2147483647`, `10e2147483647`,
		`0.1e-2147483648`, `1e-2147483648`, `0e99999999999`,
		`"\ud800"`, `"\udfff"`, `"\ufffd"`, `"\ud83d\ude00"`, `{"\ud800":1}`, `["\ud83d\u0041"]`,
		`"\\ud800"`, `{"a\udc00":"\ud83d\ude00"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		canon, err := canonicalize(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrNotCanonicalizable)
			return
		}
		again, err := canonicalize(canon)
		require.NoError(t, err, "canonical form %q does not canonicalise", canon)
		require.Equal(t, string(canon), string(again), "not idempotent: %q", raw)

		var indented bytes.Buffer
		require.NoError(t, json.Indent(&indented, raw, "", "  "), "accepted %q, which is not JSON", raw)
		fromIndented, err := canonicalize(indented.Bytes())
		require.NoError(t, err)
		require.Equal(t, string(canon), string(fromIndented), "the indented %q has another form", raw)
	})
}

// FuzzCanonicalNumber spells one value, digits × 10^(exp-shift), two ways: as written, and with
// the decimal point moved shift places left, fracZeros zeros appended and exponent exp. Whenever
// Canonicalize accepts a spelling, its form must be the normal form computed here independently
// in arbitrary precision: the digits without trailing zeros and the exact exponent. That form is
// one per value, so equal values share it and different values never do; the seed with exp at
// the bottom of int64 is the spelling whose exponent once wrapped.
func FuzzCanonicalNumber(f *testing.F) {
	f.Add(uint64(15), int64(0), uint8(1), uint8(0))
	f.Add(uint64(100), int64(2147483645), uint8(3), uint8(2))
	f.Add(uint64(1), int64(-2147483648), uint8(0), uint8(5))
	f.Add(uint64(0), int64(7), uint8(4), uint8(1))
	f.Add(uint64(15), int64(math.MinInt64), uint8(1), uint8(0))
	f.Add(uint64(15), int64(math.MaxInt64), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, digits uint64, exp int64, shift, fracZeros uint8) {
		shift %= 40
		e := big.NewInt(exp)
		plainExp := new(big.Int).Sub(e, big.NewInt(int64(shift)))
		plain := strconv.FormatUint(digits, 10) + "e" + plainExp.String()

		d := strconv.FormatUint(digits, 10)
		if pad := int(shift) + 1 - len(d); pad > 0 {
			d = strings.Repeat("0", pad) + d
		}
		intPart := strings.TrimLeft(d[:len(d)-int(shift)], "0")
		if intPart == "" {
			intPart = "0"
		}
		moved := intPart
		if frac := d[len(d)-int(shift):] + strings.Repeat("0", int(fracZeros)); frac != "" {
			moved += "." + frac
		}
		moved += "e" + e.String()

		want := "0"
		if digits != 0 {
			sig := strings.TrimRight(strconv.FormatUint(digits, 10), "0")
			zeros := len(strconv.FormatUint(digits, 10)) - len(sig)
			wantExp := new(big.Int).Add(plainExp, big.NewInt(int64(zeros)))
			want = sig
			if wantExp.Sign() != 0 {
				want += "e" + wantExp.String()
			}
		}
		for _, spelling := range []string{plain, moved} {
			got, err := canonicalize([]byte(spelling))
			if err != nil {
				require.ErrorIs(t, err, ErrNotCanonicalizable)
				continue
			}
			require.Equal(t, want, string(got), "the canonical form of %s", spelling)
		}
	})
}

// Request types for the tag tests. Each test changes one field and expects the fingerprint to
// stay the same only when the tags leave that field out.
type (
	tagCharge struct {
		Amount      int       `json:"amount"`
		Currency    string    `json:"currency"`
		RequestedAt time.Time `json:"requested_at" tempotent:"-"`
		TraceID     string    `tempotent:"-"`
	}
	// intentCharge is in intent mode: only Order and Amount count. Meta is a nested struct and
	// decides for its own fields, however it is tagged here.
	intentCharge struct {
		Order  string `tempotent:"intent"`
		Amount int    `tempotent:"intent"`
		Note   string
		Meta   tagMeta `tempotent:"intent"`
	}
	tagMeta struct {
		Source string
		SeenAt time.Time `tempotent:"-"`
	}
	Audit struct {
		By string
		At time.Time `tempotent:"-"`
	}
	IntentPart struct {
		Order   string `tempotent:"intent"`
		Comment string
	}
	// embedsPromotedIntent is in intent mode through Order, promoted from IntentPart: only
	// Order counts.
	embedsPromotedIntent struct {
		IntentPart
		Amount int
	}
	// embedsTaggedIntent is in intent mode; Audit's fields count, bar its "-" field.
	embedsTaggedIntent struct {
		Audit  `tempotent:"intent"`
		Amount int
	}
	embedsExcluded struct {
		Audit  `tempotent:"-"`
		Amount int
	}
	embedsPointer struct {
		*Audit
		Amount int
	}
	// embedsNamed has a JSON name, so IntentPart is a nested object with its own intent mode
	// and Amount counts.
	embedsNamed struct {
		IntentPart `json:"part"`
		Amount     int
	}
	// unexportedInner is promoted from an unexported embedded field, which reflect marks
	// read-only; encoding/json still encodes At and Items.
	unexportedInner struct {
		At    time.Time `tempotent:"-"`
		Items []string
	}
	embedsUnexported struct {
		unexportedInner
		Amount int
	}
	embedsUnexportedPointer struct {
		*unexportedInner
		Amount int
	}
	tagContainers struct {
		Ptr  *tagCharge
		List []tagCharge
		ByID map[string]tagCharge
		Any  any
		Arr  [1]tagCharge
	}
	nilable struct {
		Items []string
		Meta  map[string]int
		Raw   []byte
		Ptr   *[]int
	}
	keepNil struct {
		Items []string       `tempotent:"keepnil"`
		Meta  map[string]int `tempotent:"keepnil"`
		Ptr   *[]int         `tempotent:"keepnil"`
		Inner []nilable      `tempotent:"keepnil"`
	}
	keepNilIntent struct {
		Meta  map[string]int  `tempotent:"intent,keepnil"`
		Other map[string]bool `tempotent:"intent"`
		Note  []string
	}
	// selfMarshal encodes itself, so its tags do not apply.
	selfMarshal struct {
		Secret string `tempotent:"-"`
	}
	cyclic struct {
		Next *cyclic
		Tags []string
	}
	// selfEmbedding embeds itself; encoding/json does not promote its fields twice.
	selfEmbedding struct {
		*selfEmbedding
		Items []string `tempotent:"-"`
	}
)

func (s selfMarshal) MarshalJSON() ([]byte, error) { return json.Marshal(s.Secret) }

func TestFingerprintTags(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	later := at.Add(time.Minute)
	for _, tc := range []struct {
		name string
		a, b any
		same bool
	}{
		{"ExcludedField", tagCharge{Amount: 100, TraceID: "a"}, tagCharge{Amount: 100, TraceID: "b"}, true},
		{"ExcludedTime", tagCharge{Amount: 100, RequestedAt: at}, tagCharge{Amount: 100, RequestedAt: later}, true},
		{"IncludedField", tagCharge{Amount: 100}, tagCharge{Amount: 101}, false},
		{"IntentModeOtherField", intentCharge{Order: "o", Note: "a"}, intentCharge{Order: "o", Note: "b"}, true},
		{"IntentModeIntentField", intentCharge{Order: "o", Amount: 1}, intentCharge{Order: "o", Amount: 2}, false},
		{"NestedStructOwnExclusion", intentCharge{Meta: tagMeta{SeenAt: at}}, intentCharge{Meta: tagMeta{SeenAt: later}}, true},
		{"NestedStructOwnField", intentCharge{Meta: tagMeta{Source: "a"}}, intentCharge{Meta: tagMeta{Source: "b"}}, false},
		{"PromotedIntentField", embedsPromotedIntent{IntentPart{Order: "a"}, 1}, embedsPromotedIntent{IntentPart{Order: "b"}, 1}, false},
		{"PromotedNonIntentField", embedsPromotedIntent{IntentPart{Comment: "a"}, 1}, embedsPromotedIntent{IntentPart{Comment: "b"}, 1}, true},
		{"OuterFieldOfPromotedIntent", embedsPromotedIntent{IntentPart{}, 1}, embedsPromotedIntent{IntentPart{}, 2}, true},
		{"EmbeddedTaggedIntent", embedsTaggedIntent{Audit{By: "a"}, 1}, embedsTaggedIntent{Audit{By: "b"}, 1}, false},
		{"EmbeddedTaggedIntentExcludedField", embedsTaggedIntent{Audit{At: at}, 1}, embedsTaggedIntent{Audit{At: later}, 1}, true},
		{"OuterFieldOfEmbeddedIntent", embedsTaggedIntent{Audit{}, 1}, embedsTaggedIntent{Audit{}, 2}, true},
		{"EmbeddedExcluded", embedsExcluded{Audit{By: "a"}, 1}, embedsExcluded{Audit{By: "b"}, 1}, true},
		{"OuterFieldOfEmbeddedExcluded", embedsExcluded{Audit{}, 1}, embedsExcluded{Audit{}, 2}, false},
		{"EmbeddedPointerExcludedField", embedsPointer{&Audit{By: "a", At: at}, 1}, embedsPointer{&Audit{By: "a", At: later}, 1}, true},
		{"EmbeddedPointerField", embedsPointer{&Audit{By: "a"}, 1}, embedsPointer{&Audit{By: "b"}, 1}, false},
		{"NamedEmbeddedOwnMode", embedsNamed{IntentPart{Comment: "a"}, 1}, embedsNamed{IntentPart{Comment: "b"}, 1}, true},
		{"NamedEmbeddedOuterField", embedsNamed{IntentPart{}, 1}, embedsNamed{IntentPart{}, 2}, false},
		{"UnexportedEmbeddedExcluded", embedsUnexported{unexportedInner{At: at}, 1}, embedsUnexported{unexportedInner{At: later}, 1}, true},
		{"UnexportedEmbeddedNil", embedsUnexported{unexportedInner{}, 1}, embedsUnexported{unexportedInner{Items: []string{}}, 1}, true},
		{"UnexportedEmbeddedField", embedsUnexported{unexportedInner{Items: []string{"a"}}, 1}, embedsUnexported{unexportedInner{Items: []string{"b"}}, 1}, false},
		{"UnexportedEmbeddedPointer", embedsUnexportedPointer{&unexportedInner{At: at}, 1}, embedsUnexportedPointer{&unexportedInner{At: later, Items: []string{}}, 1}, true},
		{"UnexportedEmbeddedPointerField", embedsUnexportedPointer{&unexportedInner{Items: []string{"a"}}, 1}, embedsUnexportedPointer{&unexportedInner{Items: []string{"b"}}, 1}, false},
		{"PointerElement", tagContainers{Ptr: &tagCharge{TraceID: "a"}}, tagContainers{Ptr: &tagCharge{TraceID: "b"}}, true},
		{"PointerElementField", tagContainers{Ptr: &tagCharge{Amount: 1}}, tagContainers{Ptr: &tagCharge{Amount: 2}}, false},
		{"SliceElement", tagContainers{List: []tagCharge{{}, {TraceID: "a"}}}, tagContainers{List: []tagCharge{{}, {TraceID: "b"}}}, true},
		{"SliceElementField", tagContainers{List: []tagCharge{{}, {Amount: 1}}}, tagContainers{List: []tagCharge{{}, {Amount: 2}}}, false},
		{"MapValue", tagContainers{ByID: map[string]tagCharge{"x": {TraceID: "a"}, "y": {}}}, tagContainers{ByID: map[string]tagCharge{"x": {TraceID: "b"}, "y": {}}}, true},
		{"MapValueField", tagContainers{ByID: map[string]tagCharge{"x": {Amount: 1}}}, tagContainers{ByID: map[string]tagCharge{"x": {Amount: 2}}}, false},
		{"InterfaceValue", tagContainers{Any: tagCharge{TraceID: "a"}}, tagContainers{Any: tagCharge{TraceID: "b"}}, true},
		{"ArrayElement", tagContainers{Arr: [1]tagCharge{{TraceID: "a"}}}, tagContainers{Arr: [1]tagCharge{{TraceID: "b"}}}, true},
		{"TopLevelPointer", &tagCharge{TraceID: "a"}, &tagCharge{TraceID: "b"}, true},
		{"TopLevelSlice", []any{tagCharge{TraceID: "a"}}, []any{tagCharge{TraceID: "b"}}, true},
		{"NilAndEmpty", nilable{}, nilable{Items: []string{}, Meta: map[string]int{}, Raw: []byte{}, Ptr: &[]int{}}, false},
		{"NilAndEmptyBehindPointer", nilable{Ptr: new([]int)}, nilable{Items: []string{}, Meta: map[string]int{}, Raw: []byte{}, Ptr: &[]int{}}, true},
		{"NilAndEmptyBytes", nilable{Raw: nil}, nilable{Raw: []byte{}}, true},
		{"NilAndEmptyTopLevel", []string(nil), []string{}, true},
		{"NilAndEmptyInInterface", map[string]any{"x": []int(nil)}, map[string]any{"x": []int{}}, true},
		{"NilAndEmptyMapInInterface", []any{map[string]int(nil)}, []any{map[string]int{}}, true},
		{"KeepNilSlice", keepNil{Items: nil}, keepNil{Items: []string{}}, false},
		{"KeepNilMap", keepNil{Meta: nil}, keepNil{Meta: map[string]int{}}, false},
		{"KeepNilBehindPointer", keepNil{Ptr: new([]int)}, keepNil{Ptr: &[]int{}}, false},
		{"KeepNilNotInElements", keepNil{Inner: []nilable{{}}}, keepNil{Inner: []nilable{{Items: []string{}}}}, true},
		{"KeepNilWithIntent", keepNilIntent{Meta: nil}, keepNilIntent{Meta: map[string]int{}}, false},
		{"IntentWithoutKeepNil", keepNilIntent{Other: nil}, keepNilIntent{Other: map[string]bool{}}, true},
		{"NotIntentNextToKeepNil", keepNilIntent{Note: []string{"a"}}, keepNilIntent{Note: []string{"b"}}, true},
		{"TimeInTaggedStruct", tagMeta{Source: "a", SeenAt: at}, tagMeta{Source: "a", SeenAt: later}, true},
		{"TimeIncludedInTaggedStruct", tagCharge{RequestedAt: at, Currency: "eur"}, tagCharge{RequestedAt: at, Currency: "eur", TraceID: "t"}, true},
		{"TimeChanges", struct{ At time.Time }{at}, struct{ At time.Time }{later}, false},
		{"MarshalerDecides", []selfMarshal{{"a"}}, []selfMarshal{{"b"}}, false},
		{"SelfEmbedding", selfEmbedding{selfEmbedding: &selfEmbedding{}, Items: []string{"a"}}, selfEmbedding{selfEmbedding: &selfEmbedding{}, Items: []string{"b"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := FingerprintOf(tc.a)
			require.NoError(t, err)
			b, err := FingerprintOf(tc.b)
			require.NoError(t, err)
			if tc.same {
				require.True(t, a.Matches(b), "%s and %s", a, b)
			} else {
				require.False(t, a.Matches(b), "%s", a)
			}
		})
	}
}

// TestFingerprintTagErrors checks that a tag the fingerprint cannot honour is refused with the
// field named, even where the struct that has it is not in the value.
func TestFingerprintTagErrors(t *testing.T) {
	t.Parallel()
	type misspelt struct {
		Amount int `tempotent:"intnet"`
	}
	type dashWithOption struct {
		Amount int `tempotent:"-,keepnil"`
	}
	type unexportedIntent struct {
		Order  string
		amount int `tempotent:"intent"`
	}
	type jsonSkippedIntent struct {
		Amount int `json:"-" tempotent:"intent"`
	}
	type jsonSkippedExcluded struct {
		Amount int `json:"-" tempotent:"-"`
	}
	for _, tc := range []struct {
		name  string
		v     any
		wants []string // "" means no error
	}{
		{"UnknownOption", misspelt{}, []string{"misspelt.Amount", `"intnet"`}},
		{"UnknownOptionBehindNilPointer", struct{ P *misspelt }{}, []string{"misspelt.Amount", `"intnet"`}},
		{"UnknownOptionInMapValue", map[string][]misspelt{}, []string{"misspelt.Amount"}},
		{"UnknownOptionInInterface", []any{misspelt{}}, []string{"misspelt.Amount"}},
		{"DashWithOption", dashWithOption{}, []string{"dashWithOption.Amount", `"-"`}},
		{"IntentOnUnexported", unexportedIntent{amount: 1}, []string{"unexportedIntent.amount", "does not encode"}},
		{"IntentOnJSONSkipped", jsonSkippedIntent{}, []string{"jsonSkippedIntent.Amount", "does not encode"}},
		{"ExcludedJSONSkipped", jsonSkippedExcluded{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FingerprintOf(tc.v)
			if tc.wants == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrNotCanonicalizable)
			for _, want := range tc.wants {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

// TestFingerprintVersions checks that FingerprintOf labels its result version 1 exactly when
// version 2 changed nothing, so that workers of earlier releases keep matching, and that
// FingerprintAt computes each version.
func TestFingerprintVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		v       any
		version int16
	}{
		{"Untagged", struct{ Amount int }{100}, 1},
		{"UntaggedEmptySlice", struct{ Items []string }{[]string{}}, 1},
		{"ExcludedFieldZero", tagCharge{Amount: 100}, 1},
		{"ExcludedFieldSet", tagCharge{Amount: 100, TraceID: "t"}, 2},
		{"NonIntentFieldSet", intentCharge{Order: "o", Note: "n"}, 2},
		{"NilSlice", struct{ Items []string }{}, 2},
		{"NilsKept", keepNil{Ptr: new([]int)}, 1},
		{"NilInsideKeptSlice", keepNil{Inner: []nilable{{}}}, 2},
		{"Nil", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fp, err := FingerprintOf(tc.v)
			require.NoError(t, err)
			require.Equal(t, tc.version, fp.Version)
			at2, err := FingerprintAt(tc.v, 2)
			require.NoError(t, err)
			require.Equal(t, fp, at2, "FingerprintAt(v, 2) is FingerprintOf")

			at1, err := FingerprintAt(tc.v, 1)
			require.NoError(t, err)
			require.Equal(t, int16(1), at1.Version)
			raw, err := json.Marshal(tc.v)
			require.NoError(t, err)
			plain, err := FingerprintJSON(raw)
			require.NoError(t, err)
			require.Equal(t, plain, at1, "version 1 is the plain encoding/json form")
			require.Equal(t, tc.version == 1, fp.String() == at1.String(), "a version-1 result is the version-1 form, version and sum")
		})
	}
	_, err := FingerprintAt(1, 3)
	require.ErrorContains(t, err, "version 3")
	_, err = FingerprintAt(1, 0)
	require.Error(t, err)
}

func TestFingerprintMatches(t *testing.T) {
	t.Parallel()
	fp := func(version int16, b byte) Fingerprint {
		f := Fingerprint{Version: version}
		f.Sum[0] = b
		return f
	}
	for _, tc := range []struct {
		name  string
		a, b  Fingerprint
		match bool
	}{
		{"Equal", fp(1, 1), fp(1, 1), true},
		{"Version1And2", fp(1, 1), fp(2, 1), true},
		{"Version2And1", fp(2, 1), fp(1, 1), true},
		{"OtherSum", fp(1, 1), fp(2, 2), false},
		{"SameVersionOtherSum", fp(2, 1), fp(2, 2), false},
		{"UnknownVersion", fp(3, 1), fp(1, 1), false},
		{"NoVersion", fp(0, 1), fp(1, 1), false},
		{"SameUnknownVersion", fp(3, 1), fp(3, 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.match, tc.a.Matches(tc.b))
		})
	}

	// A request built with an empty slice has the version-1 form; the same request built with a
	// nil slice needs version 2 to say so, and matches it.
	empty, err := FingerprintOf(struct{ Items []string }{[]string{}})
	require.NoError(t, err)
	nilItems, err := FingerprintOf(struct{ Items []string }{})
	require.NoError(t, err)
	require.Equal(t, int16(1), empty.Version)
	require.Equal(t, int16(2), nilItems.Version)
	require.NotEqual(t, empty, nilItems)
	require.True(t, nilItems.Matches(empty))
	require.True(t, empty.Matches(nilItems))
}

// TestFingerprintDoesNotMutate checks that the copy version 2 fingerprints is a copy: the
// caller's nil slices stay nil and its left-out fields keep their values, also where the value
// shares memory with the copy (slices, maps, pointers).
func TestFingerprintDoesNotMutate(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := &tagContainers{
		Ptr:  &tagCharge{Amount: 1, TraceID: "p", RequestedAt: at},
		List: []tagCharge{{TraceID: "l"}},
		ByID: map[string]tagCharge{"x": {TraceID: "m"}},
		Any:  &nilable{},
	}
	inner := &unexportedInner{At: at}
	embedded := &embedsUnexportedPointer{unexportedInner: inner}
	_, err := FingerprintOf(v)
	require.NoError(t, err)
	_, err = FingerprintOf(embedded)
	require.NoError(t, err)

	require.Equal(t, "p", v.Ptr.TraceID)
	require.Equal(t, at, v.Ptr.RequestedAt)
	require.Equal(t, "l", v.List[0].TraceID)
	require.Equal(t, "m", v.ByID["x"].TraceID)
	n := v.Any.(*nilable)
	require.Nil(t, n.Items)
	require.Nil(t, n.Meta)
	require.Nil(t, n.Raw)
	require.Same(t, inner, embedded.unexportedInner)
	require.Equal(t, at, inner.At)
	require.Nil(t, inner.Items)
}

// TestFingerprintCycles checks that a value that contains itself is an error rather than a hang,
// and that a deep value that does not is fingerprinted as encoding/json encodes it.
func TestFingerprintCycles(t *testing.T) {
	t.Parallel()
	loop := &cyclic{}
	loop.Next = loop
	_, err := FingerprintOf(loop)
	require.ErrorIs(t, err, ErrNotCanonicalizable)
	require.ErrorContains(t, err, "contains itself")

	m := map[string]any{}
	m["self"] = m
	_, err = FingerprintOf(m)
	require.ErrorIs(t, err, ErrNotCanonicalizable)

	s := []any{nil}
	s[0] = s
	_, err = FingerprintOf(s)
	require.ErrorIs(t, err, ErrNotCanonicalizable)

	var deep *cyclic
	for range cycleCheckDepth + 100 {
		deep = &cyclic{Next: deep}
	}
	fp, err := FingerprintOf(deep)
	require.NoError(t, err)
	require.Equal(t, int16(2), fp.Version, "nil Tags became empty")
}
