package keys

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FingerprintVersion is the newest version of the way a request becomes the canonical JSON that
// a Fingerprint hashes; the version is stored beside every fingerprint in a receipt.
//
//   - Version 1 hashes the canonical form (see FingerprintJSON) of the request's encoding/json
//     form. FingerprintJSON computes it, and FingerprintOf did before version 2.
//   - Version 2 first applies the request's tempotent struct tags and makes nil slices and maps
//     empty (see FingerprintOf), then hashes the same canonical form.
//
// Both versions hash one canonical grammar, so equal sums are equal canonical text whatever the
// version, and Fingerprint.Matches compares them so. FingerprintOf labels a fingerprint version 1
// whenever version 2 changed nothing in the canonical text: workers of earlier releases, which
// compare fingerprints with ==, keep matching the receipts that newer workers write for requests
// whose JSON no tag or nil changes. The other way round, such a worker refuses a version-2
// receipt as a payload mismatch (and calls nothing): during a rolling upgrade, a retry of an
// intent that a new worker recorded under version 2 fails if an old worker takes it, so keep the
// rollout short or drain first.
//
// A receipt recorded under version 1 is compared under version 1 when the caller still has the
// request: it recomputes FingerprintAt(request, stored.Version), as the activity package does, so
// the retries of intents in flight keep matching across the upgrade. What version 2 adds holds
// only for intents recorded after the upgrade: a receipt written before it with null for a nil
// slice does not match a retry that now sends an empty slice, and one written before a field was
// tagged "-" does not match a retry in which that field changed.
//
// A version is added only when the JSON of some request that was accepted before changes.
// Refusing inputs that had no single canonical form (as unpaired surrogate escapes and
// unrepresentable exponents are now) changes no accepted form and keeps the version. A version
// that changes the canonical grammar itself must not be matched to earlier ones by sum.
const FingerprintVersion = 2

// ErrNotCanonicalizable is matched by errors from canonicalize and the Fingerprint functions when
// the request has no one canonical form: malformed JSON, invalid UTF-8, an object with a
// repeated member name, a string or member name with an unpaired surrogate escape (such as
// "\ud800"), a number whose exponent is beyond the int32 range (written or canonical), a Go
// value that encoding/json cannot encode or that contains itself, or a tempotent struct tag that
// cannot be honoured (an unknown option, intent on a field that encoding/json does not encode, or
// intent on an embedded struct whose field encoding/json drops for one the intent leaves out; the
// message names the field and says why).
var ErrNotCanonicalizable = errors.New("request has no canonical JSON form")

// Fingerprint identifies a request's content: the SHA-256 of its canonical JSON, with the version
// of the way the request became that JSON (see FingerprintVersion). The same key with a
// Fingerprint that does not match is a payload mismatch.
//
// Matches is the only comparison: two fingerprints are the same request when Matches says so,
// which includes a version-1 and a version-2 fingerprint with equal sums (a request built with an
// empty slice and the same request built with a nil one). Comparing Version and Sum field by field
// would call those different, so Fingerprint is not comparable: == and != do not compile, and a
// Fingerprint cannot be a map key (a map of requests can be keyed by Sum, which versions 1 and 2
// of one request share). Build one with a keyed literal: Fingerprint{Version: 1, Sum: sum}.
type Fingerprint struct {
	// A func array of length zero holds nothing and makes == and map keys a compile error, so
	// that Matches is the comparison. First, because a zero-size last field would be padded.
	_ [0]func()

	Version int16
	Sum     [sha256.Size]byte
}

// String renders the fingerprint as "v1:<hex>", or "k1:<hex>" when it is keyed (see Keyed).
func (f Fingerprint) String() string {
	prefix := "v"
	if f.IsKeyed() {
		prefix = "k"
	}
	return prefix + strconv.Itoa(int(f.plainVersion())) + ":" + hex.EncodeToString(f.Sum[:])
}

// Matches reports whether f and stored (typically a request's fingerprint and one read from a
// receipt) identify the same request: when they are equal, or when both are of version 1 or 2
// and their sums are equal. Versions 1 and 2 hash the same canonical JSON grammar and differ only
// in how a Go value becomes JSON, so equal sums are equal canonical text. A future version that
// changes the grammar must not be matched to these by sum. Keyed fingerprints (see Keyed) follow
// the same rule among themselves, and never match a plain one: MatchesKeyed compares a plain
// fingerprint with a keyed one, given the secrets.
func (f Fingerprint) Matches(stored Fingerprint) bool {
	if f.IsKeyed() != stored.IsKeyed() || !sumsEqual(&f.Sum, &stored.Sum) {
		return false
	}
	sameGrammar := func(v int16) bool { return v == 1 || v == 2 }
	return f.Version == stored.Version || sameGrammar(f.plainVersion()) && sameGrammar(stored.plainVersion())
}

// FingerprintJSON fingerprints a request given as JSON. Object member order and insignificant
// whitespace do not matter, numbers compare by value ("1", "1.0" and "1e0" are the same request),
// and strings compare byte for byte after JSON unescaping (no Unicode normalisation).
//
// The result has Version 1. JSON carries no Go types, so FingerprintOf's tags and nil rule cannot
// apply: null and [] are different requests here. For the encoding/json form of a value v it
// equals FingerprintAt(v, 1).
func FingerprintJSON(raw []byte) (Fingerprint, error) {
	canon, err := canonicalize(raw)
	if err != nil {
		return Fingerprint{}, err
	}
	return Fingerprint{Version: 1, Sum: sha256.Sum256(canon)}, nil
}

// FingerprintOf fingerprints v: the canonical form (see FingerprintJSON) of v's encoding/json
// form, after two changes that fingerprint version 2 makes to a copy of v (v itself is never
// written to):
//
//   - Struct tags choose the fields that count. A field tagged `tempotent:"-"` is left out: the
//     copy holds its zero value, so changing it does not change the fingerprint. When a field of
//     a struct is tagged `tempotent:"intent"`, only the struct's intent fields count and the
//     others are left out. The fields that encoding/json promotes from an embedded struct count
//     as the struct's own, and an embedded struct tagged intent brings all its fields; a nested
//     struct that is not embedded decides for its own fields. Tags apply at any depth: through
//     pointers and interface values, and in slice, array and map elements.
//   - A nil slice (including []byte) or map is the same request as an empty one, although
//     encoding/json writes null for one and [], {} or "" for the other: a request should not
//     depend on how the code that built it spelt "none". Tag a field `tempotent:"keepnil"` to
//     keep them apart in it (in the field's own value, through pointers, not in the elements
//     inside it). Options combine: `tempotent:"intent,keepnil"`.
//
// Leaving a field out promises that it does not change what the request does: a retry that
// differs only in left-out fields replays the first result. Leave out what varies between the
// attempts of one intent (the time the request was built, a trace ID), never what the effect
// depends on: with Amount left out, a retry with another amount replays the first charge instead
// of being refused as a payload mismatch.
//
// A value that marshals itself (json.Marshaler or encoding.TextMarshaler, such as time.Time) is
// encoded by its own method, so tags inside it do not apply. A left-out field still appears in
// the JSON, as its zero value.
//
// The result has Version 1 when the tags and the nil rule changed nothing in the canonical form
// (a struct without tags, nil slices or nil maps), and Version 2 otherwise; see
// FingerprintVersion. An unknown tag option, or intent on a field that encoding/json does not
// encode, is an error that names the field and says why; so is a value that encoding/json cannot
// encode (a channel, a func) or that contains itself. All wrap ErrNotCanonicalizable. A field
// encoding/json does not encode is unexported, tagged json:"-", or a promoted field that it drops:
// one shadowed by a shallower field of the same JSON name, or outranked at the same depth by one
// whose name comes from a json tag, or in conflict with another at the same depth (it drops both).
// An embedded struct tagged intent must promote a field that encoding/json encodes. Such a tag
// would otherwise leave out every field that is not tagged intent, including the one encoding/json
// writes under that name, so requests that differ in it would share a fingerprint. For the same
// reason, when encoding/json drops a field that an embedded struct tagged intent brings into the
// intent (at any depth) and writes under its name a field that is not part of the intent, the
// tag is an error: with Base tagged intent and an untagged Amount beside it, Base.Amount is
// shadowed and Amount left out. Tag the field that encoding/json writes intent too, or rename one
// of them. A field dropped because fields of its name conflict at one depth, so that the JSON has
// none, is accepted. Note that encoding/json replaces invalid UTF-8 in Go strings with U+FFFD
// before the fingerprint sees it; pass such data as []byte, which is encoded as base64.
func FingerprintOf(v any) (Fingerprint, error) {
	return fingerprintV2(v)
}

// FingerprintAt fingerprints v under the given version: 1 is the canonical form of v's plain
// encoding/json form (what FingerprintOf computed before version 2), and 2 is FingerprintOf (whose
// result is labelled Version 1 when version 2 changed nothing). Use it to compare a request with a
// receipt recorded under another version:
//
//	fp, err := keys.FingerprintAt(request, stored.Version)
//	same := err == nil && fp.Matches(stored)
//
// A version this release does not know, such as one recorded by a newer release, is an error.
func FingerprintAt(v any, version int16) (Fingerprint, error) {
	switch version {
	case 1:
		canon, err := marshalCanonical(v)
		if err != nil {
			return Fingerprint{}, err
		}
		return Fingerprint{Version: 1, Sum: sha256.Sum256(canon)}, nil
	case 2:
		return fingerprintV2(v)
	}
	if version > FingerprintVersion {
		return Fingerprint{}, fmt.Errorf("fingerprint request under version %d: this release knows versions up to %d; the receipt was recorded by a newer release", version, FingerprintVersion)
	}
	return Fingerprint{}, fmt.Errorf("fingerprint request under version %d: there is no such version; versions start at 1", version)
}

// fingerprintV2 is FingerprintOf. It marshals v a second time, in its version-1 form, only when
// the tags or the nil rule changed something, to tell whether the result may be labelled
// version 1.
func fingerprintV2(v any) (Fingerprint, error) {
	prepared, changed, err := prepareV2(v)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint request: %w", err)
	}
	canon, err := marshalCanonical(prepared)
	if err != nil {
		return Fingerprint{}, err
	}
	version := int16(1)
	if changed {
		// v's own form may not exist (a left-out field that encoding/json refuses to encode);
		// then the version-2 form stands.
		if plain, err := marshalCanonical(v); err != nil || !bytes.Equal(plain, canon) {
			version = 2
		}
	}
	return Fingerprint{Version: version, Sum: sha256.Sum256(canon)}, nil
}

// marshalCanonical returns the canonical form of v's encoding/json form.
func marshalCanonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("fingerprint request: %w: %w", ErrNotCanonicalizable, err)
	}
	return canonicalize(raw)
}

// canonicalize returns the canonical form of a JSON document (the grammar of versions 1 and 2): object
// members sorted by the bytes of their names at every depth, no insignificant whitespace, strings
// re-encoded without HTML escaping, and numbers in the exact decimal form described at
// canonicalNumber. It refuses what JSON decoders resolve differently or lossily, instead of
// guessing: invalid UTF-8, repeated member names, unpaired surrogate escapes (see
// checkSurrogateEscapes) and numbers with exponents it cannot represent exactly.
func canonicalize(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("canonicalize: %w: invalid UTF-8", ErrNotCanonicalizable)
	}
	if err := checkSurrogateEscapes(raw); err != nil {
		return nil, fmt.Errorf("canonicalize: %w: %w", ErrNotCanonicalizable, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonicalValue(dec, &out); err != nil {
		return nil, fmt.Errorf("canonicalize: %w: %w", ErrNotCanonicalizable, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("canonicalize: %w: data after the top-level value", ErrNotCanonicalizable)
	}
	return out.Bytes(), nil
}

func canonicalValue(dec *json.Decoder, out *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonicalObject(dec, out)
		case '[':
			return canonicalArray(dec, out)
		}
		return fmt.Errorf("unexpected %q", t)
	case string:
		return writeString(out, t)
	case json.Number:
		n, err := canonicalNumber(string(t))
		if err != nil {
			return err
		}
		out.WriteString(n)
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	}
	return nil
}

func canonicalObject(dec *json.Decoder, out *bytes.Buffer) error {
	type member struct{ name, value string }
	var members []member
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string) // the decoder only yields strings in name position
		if seen[name] {
			return fmt.Errorf("member %q appears twice", name)
		}
		seen[name] = true
		var v bytes.Buffer
		if err := canonicalValue(dec, &v); err != nil {
			return err
		}
		members = append(members, member{name, v.String()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.name, b.name) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := writeString(out, m.name); err != nil {
			return err
		}
		out.WriteByte(':')
		out.WriteString(m.value)
	}
	out.WriteByte('}')
	return nil
}

func canonicalArray(dec *json.Decoder, out *bytes.Buffer) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonicalValue(dec, out); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return err
	}
	out.WriteByte(']')
	return nil
}

// checkSurrogateEscapes refuses a string or member name of raw that holds an unpaired UTF-16
// surrogate escape: a high surrogate \uD800–\uDBFF not immediately followed by a low surrogate
// escape \uDC00–\uDFFF, or a low surrogate without a high one before it. encoding/json decodes
// each of them to U+FFFD, so without this check "\ud800", "\udfff" and "\ufffd" (which is legal
// and stays accepted) would be one request. A paired escape is the character it spells and
// canonicalises to that character in UTF-8.
//
// It looks at the raw bytes because the decoded strings no longer tell the escapes apart. It
// only follows string boundaries and escapes; anything malformed is left to the decoder, which
// reports it.
func checkSurrogateEscapes(raw []byte) error {
	inString := false
	for i := 0; i < len(raw); i++ {
		if !inString {
			inString = raw[i] == '"'
			continue
		}
		switch raw[i] {
		case '"':
			inString = false
		case '\\':
			r, ok := unicodeEscape(raw[i:])
			if !ok {
				i++ // a one-character escape such as \" or \n, or a malformed one
				continue
			}
			switch {
			case r >= 0xD800 && r <= 0xDBFF:
				if lo, ok := unicodeEscape(raw[i+6:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // the pair
					continue
				}
				return fmt.Errorf("string at byte %d: high surrogate escape %s is not followed by a low surrogate escape; JSON decoders replace it with U+FFFD, so send the character itself or a complete surrogate pair", i, raw[i:i+6])
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("string at byte %d: low surrogate escape %s has no high surrogate escape before it; JSON decoders replace it with U+FFFD, so send the character itself or a complete surrogate pair", i, raw[i:i+6])
			}
			i += 5
		}
	}
	return nil
}

// unicodeEscape decodes the \uXXXX escape at the start of b, if there is one.
func unicodeEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

func writeString(out *bytes.Buffer, s string) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	out.Truncate(out.Len() - 1) // Encode appends a newline
	return nil
}

// canonicalNumber renders a JSON number exactly, in one form per value: the significant digits
// with leading and trailing zeros removed, then "e" and the decimal exponent when it is not zero
// ("1.50" → "15e-1", "100" → "1e2", "-0.0" → "0"). It never rounds, so amounts beyond float64
// precision still compare exactly.
//
// Exponents are bounded so that no arithmetic on them can wrap: the exponent as written and the
// exponent of the canonical form must both lie in the int32 range, and the shift between them
// (the number of digits moved) is computed in int64, where it cannot overflow for any input that
// fits in memory. A number outside these bounds is refused rather than given a form that another
// value might share (with wrapping int arithmetic, 1.5e-9223372036854775808 and
// 15e9223372036854775807 both became "15e9223372036854775807"). Bounding the canonical exponent
// too keeps every canonical form canonicalisable again.
func canonicalNumber(lit string) (string, error) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, expPart, hasExp := strings.Cut(strings.ToLower(lit), "e")
	var exp int64
	if hasExp {
		e, err := strconv.ParseInt(expPart, 10, 32)
		if err != nil {
			return "", fmt.Errorf("number %q: exponent beyond ±2^31; such a number has no canonical form here", lit)
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	if trimmed == "" {
		return "0", nil
	}
	exp += int64(len(digits)-len(trimmed)) - int64(len(frac))
	if exp < math.MinInt32 || exp > math.MaxInt32 {
		return "", fmt.Errorf("number %q: its canonical exponent %d is beyond ±2^31; such a number has no canonical form here", lit, exp)
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(trimmed)
	if exp != 0 {
		b.WriteByte('e')
		b.WriteString(strconv.FormatInt(exp, 10))
	}
	return b.String(), nil
}
