package keys_test

import (
	"fmt"

	"github.com/tempotent/tempotent/keys"
)

func ExampleKeyedFingerprintOf() {
	// A plain fingerprint of a guessable request confirms a guess; a keyed one does not without
	// the key. Stores key their receipts' fingerprints themselves (Config.FingerprintKeys).
	oldKey, newKey := []byte("the key before the rotation, 32B"), []byte("the key after the rotation, 32 B")
	req := map[string]any{"email": "ada@example.com", "amount": 100}
	plain, _ := keys.FingerprintOf(req)
	stored, _ := keys.KeyedFingerprintOf(oldKey, req)
	fmt.Println(stored.String()[:3], stored.IsKeyed(), plain.Matches(stored))
	// After a rotation the new key signs, and the old one still verifies.
	fmt.Println(keys.MatchesKeyed(plain, stored, [][]byte{newKey, oldKey}))
	fmt.Println(keys.MatchesKeyed(plain, stored, [][]byte{newKey}))
	// A receipt recorded before any key had the plain fingerprint, which still matches.
	fmt.Println(keys.MatchesKeyed(plain, plain, [][]byte{newKey}))
	// Output:
	// k1: true false
	// true
	// false
	// true
}
