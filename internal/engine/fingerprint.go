package engine

import (
	"bytes"
	"fmt"

	"github.com/tempotent/tempotent/keys"
)

// fingerprintKeyMin is the shortest key Config.FingerprintKeys accepts: a shorter secret can
// be searched for with the request guesses it is meant to stop.
const fingerprintKeyMin = 16

// validateFingerprintKeys refuses a key too short to hide anything, and a key given twice.
func validateFingerprintKeys(ks [][]byte) error {
	for i, k := range ks {
		if len(k) < fingerprintKeyMin {
			return fmt.Errorf("Config.FingerprintKeys[%d] is %d bytes; a key must be at least %d random bytes (32 recommended), kept secret like a password", i, len(k), fingerprintKeyMin)
		}
		for j := range i {
			if bytes.Equal(ks[j], k) {
				return fmt.Errorf("Config.FingerprintKeys[%d] repeats Config.FingerprintKeys[%d]; give each key once, the one that signs first", i, j)
			}
		}
	}
	return nil
}

// keyFingerprint keys c's fingerprint with the store's first key, keeping the plain one to
// compare with receipts recorded before the key was turned on. Calling it again changes
// nothing: a keyed fingerprint stays as it is.
func (s *Store) keyFingerprint(c *Call) {
	if c.Fingerprint.IsKeyed() || len(s.cfg.FingerprintKeys) == 0 {
		return
	}
	c.plain = c.Fingerprint
	c.Fingerprint = c.Fingerprint.Keyed(s.cfg.FingerprintKeys[0])
}

// fingerprintMatches reports whether a receipt recorded under stored was recorded for c's
// request, in any form the store may have written it: keyed with any of its keys (the first
// signs, all verify), or plain (a receipt recorded before the key was turned on), each under
// the fingerprint version it was recorded with when c still has its request.
func (s *Store) fingerprintMatches(c Call, stored keys.Fingerprint) bool {
	if c.Fingerprint.Matches(stored) {
		return true
	}
	plain := c.plain
	if plain.Version == 0 && !c.Fingerprint.IsKeyed() {
		plain = c.Fingerprint
	}
	if plain.Version != 0 && keys.MatchesKeyed(plain, stored, s.cfg.FingerprintKeys) {
		return true
	}
	if c.Request == nil {
		return false
	}
	version := stored.Version
	if stored.IsKeyed() {
		version -= keys.KeyedVersionBase
	}
	if version == plain.Version {
		return false // compared above
	}
	fp, err := keys.FingerprintAt(c.Request, version)
	return err == nil && keys.MatchesKeyed(fp, stored, s.cfg.FingerprintKeys)
}

// cloneKeys copies the keys, so that a caller reusing its slices changes no store's keys.
func cloneKeys(ks [][]byte) [][]byte {
	if ks == nil {
		return nil
	}
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = bytes.Clone(k)
	}
	return out
}

// keyedMismatchNote says, for a receipt whose fingerprint is keyed, what else than another
// request makes it differ.
func keyedMismatchNote(stored keys.Fingerprint) string {
	if !stored.IsKeyed() {
		return ""
	}
	return "; the receipt's fingerprint is keyed, so it also differs when the store no longer has the key it was recorded under: keep every key of the retention in Config.FingerprintKeys"
}
