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

// FingerprintVersion is the version of the canonical form that Fingerprint hashes; it is stored
// beside every fingerprint in a receipt. Fingerprints of different versions never compare equal,
// even for the same request, since nothing can recompute an old version's hash from the receipt:
// a receipt recorded under another version is refused as a payload mismatch whose message says
// that the versions differ, and nothing is called (the activity package compares Fingerprint
// values with ==).
//
// So a new version turns every retry or replay of an intent recorded under the old one into a
// mismatch: it is bumped only when the canonical form of some input that was accepted before
// changes, and an upgrade that bumps it should drain in-flight work first. Refusing inputs that
// had no single canonical form (as unpaired surrogate escapes and unrepresentable exponents are
// now) changes no accepted form and keeps the version.
const FingerprintVersion = 1

// ErrNotCanonicalizable is matched by errors from canonicalize and the Fingerprint functions when
// the request is not JSON that has one canonical form: malformed JSON, invalid UTF-8, an object
// with a repeated member name, a string or member name with an unpaired surrogate escape (such
// as "\ud800"), or a number whose exponent is beyond the int32 range (written or canonical).
var ErrNotCanonicalizable = errors.New("request has no canonical JSON form")

// Fingerprint identifies a request's content: the SHA-256 of its canonical JSON, with the version
// of the canonical form. Two Fingerprints are equal (==) only when both Version and Sum are. Same
// key with a different Fingerprint is a payload mismatch, and that includes a Fingerprint of
// another Version: the request is not compared across versions (see FingerprintVersion).
type Fingerprint struct {
	Version int16
	Sum     [sha256.Size]byte
}

// String renders the fingerprint as "v1:<hex>".
func (f Fingerprint) String() string {
	return "v" + strconv.Itoa(int(f.Version)) + ":" + hex.EncodeToString(f.Sum[:])
}

// FingerprintJSON fingerprints a request given as JSON. Object member order and insignificant
// whitespace do not matter, numbers compare by value ("1", "1.0" and "1e0" are the same request),
// and strings compare byte for byte after JSON unescaping (no Unicode normalisation).
func FingerprintJSON(raw []byte) (Fingerprint, error) {
	canon, err := canonicalize(raw)
	if err != nil {
		return Fingerprint{}, err
	}
	return Fingerprint{Version: FingerprintVersion, Sum: sha256.Sum256(canon)}, nil
}

// FingerprintOf fingerprints v's encoding/json form (see FingerprintJSON). A value that
// encoding/json cannot encode (a channel, a func) is an error. Note that encoding/json replaces
// invalid UTF-8 in Go strings with U+FFFD before the fingerprint sees it; pass such data as
// []byte, which is encoded as base64.
func FingerprintOf(v any) (Fingerprint, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("fingerprint request: %w: %w", ErrNotCanonicalizable, err)
	}
	return FingerprintJSON(raw)
}

// canonicalize returns the canonical form of a JSON document (version FingerprintVersion): object
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
