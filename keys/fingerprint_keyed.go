package keys

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
)

// KeyedVersionBase is added to a fingerprint's version when it is keyed: a keyed fingerprint
// of a version-2 request has Version 102 and is written "k2:<hex>". The version left after
// subtracting it says how the request became canonical JSON (see FingerprintVersion).
//
// A plain fingerprint is the SHA-256 of the request's canonical JSON: anyone who can read it
// and guess the request (an amount, an email address, a card's last digits) can confirm the
// guess by hashing it. A keyed fingerprint is the HMAC-SHA256, under a secret of the store's,
// of that plain fingerprint: without the secret it confirms nothing.
const KeyedVersionBase int16 = 100

// KeyedFingerprintOf is FingerprintOf(v) keyed with secret (see Fingerprint.Keyed). A store
// whose Config.FingerprintKeys is set keys the fingerprints it records itself: call this only
// to build a Call.Fingerprint by hand for such a store, with its first key.
func KeyedFingerprintOf(secret []byte, v any) (Fingerprint, error) {
	fp, err := FingerprintOf(v)
	if err != nil {
		return Fingerprint{}, err
	}
	return fp.Keyed(secret), nil
}

// Keyed returns f keyed with secret: Version KeyedVersionBase+f.Version and Sum the
// HMAC-SHA256 of f.Sum under secret. Two requests have equal keyed fingerprints under one
// secret exactly when their plain ones match. A fingerprint that is already keyed, or zero,
// is returned as it is; an empty secret keys nothing either (it would hide nothing).
func (f Fingerprint) Keyed(secret []byte) Fingerprint {
	if f.Version == 0 || f.IsKeyed() || len(secret) == 0 {
		return f
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(f.Sum[:])
	out := Fingerprint{Version: KeyedVersionBase + f.Version}
	mac.Sum(out.Sum[:0])
	return out
}

// IsKeyed reports whether f was keyed with a secret (see Keyed).
func (f Fingerprint) IsKeyed() bool { return f.Version > KeyedVersionBase }

// plainVersion is the version of the canonical JSON form f hashes, keyed or not.
func (f Fingerprint) plainVersion() int16 {
	if f.IsKeyed() {
		return f.Version - KeyedVersionBase
	}
	return f.Version
}

// sumsEqual compares two sums in constant time: a keyed sum is a MAC.
func sumsEqual(a, b *[sha256.Size]byte) bool {
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// MatchesKeyed reports whether stored (read from a receipt) was recorded for the request whose
// plain fingerprint is plain: stored equals plain (a receipt recorded before the store had a
// key), or stored is plain keyed with one of secrets. Give every secret the store has used,
// the one it signs with first: rotating the key adds a new first secret and keeps the old ones
// until no receipt recorded under them is still retained. A plain fingerprint that is keyed
// already matches only itself.
func MatchesKeyed(plain, stored Fingerprint, secrets [][]byte) bool {
	if !stored.IsKeyed() || plain.IsKeyed() {
		return plain.Matches(stored)
	}
	for _, s := range secrets {
		if len(s) > 0 && plain.Keyed(s).Matches(stored) {
			return true
		}
	}
	return false
}
