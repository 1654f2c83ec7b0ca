package keys

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

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
	require.Equal(t, int16(FingerprintVersion), a.Version)

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
