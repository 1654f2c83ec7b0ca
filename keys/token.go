package keys

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// TokenLen is the length of every Token: 43 characters of unpadded base64url (RFC 4648 §5), that
// is 256 bits. Providers' limits for idempotency keys are well above it: Stripe accepts up to
// 255 characters, Adyen 64, PayPal's PayPal-Request-Id 108. For APIs that demand a UUID, use
// Token.UUID.
const TokenLen = 43

// Token is the downstream form of a Key; see Key.Token. The zero Token is empty and is never
// produced by Key.Token.
type Token string

// String returns the token itself.
func (t Token) String() string { return string(t) }

// UUID renders the token as an RFC 9562 version 8 UUID (36 characters) for APIs whose
// idempotency key must be a UUID. It is derived from the token, so it is as stable as the token;
// it carries 122 bits of the hash.
func (t Token) UUID() string {
	var u [16]byte
	if raw, err := base64.RawURLEncoding.DecodeString(string(t)); err == nil && len(raw) >= 16 {
		copy(u[:], raw)
	} else {
		sum := sha256.Sum256([]byte(t)) // not a Key.Token: still deterministic
		copy(u[:], sum[:])
	}
	u[6] = (u[6] & 0x0f) | 0x80 // version 8: custom
	u[8] = (u[8] & 0x3f) | 0x80 // variant 10
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

type tokenKey struct{}

// WithToken returns a context that carries the downstream token of the intent being executed.
// The activity package sets it around the wrapped function; code that calls an external system
// reads it with TokenFrom (the downstream package does) and sends it as the idempotency key.
func WithToken(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, t)
}

// TokenFrom returns the token carried by ctx, and false when there is none: an unsafe call made
// outside a tempotent-wrapped activity has no key and should be refused, not sent without one.
func TokenFrom(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok && t != ""
}
