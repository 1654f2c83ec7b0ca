package keys_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

// Seeded: for random small requests and secrets, a keyed fingerprint matches another exactly
// when the plain fingerprints match and the secrets are the same; MatchesKeyed accepts the plain
// form and the form keyed with any listed secret, and nothing else; String marks keyed ones.
func TestKeyedFingerprintAgainstPlainModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 8))
	secrets := [][]byte{[]byte("secret number one, 16+"), []byte("secret number two, 16+"), []byte("secret number three")}
	for i := range 2000 {
		a, b := map[string]any{"amount": rng.IntN(3)}, map[string]any{"amount": rng.IntN(3)}
		if rng.IntN(2) == 0 {
			b["tags"] = []string{} // version 2 of a request whose version 1 has no tags
		}
		fa, err := keys.FingerprintOf(a)
		require.NoError(t, err)
		fb, err := keys.FingerprintOf(b)
		require.NoError(t, err)
		sa, sb := secrets[rng.IntN(3)], secrets[rng.IntN(3)]
		same := fa.Matches(fb)
		ka, kb := fa.Keyed(sa), fb.Keyed(sb)
		require.True(t, ka.IsKeyed())
		require.Equal(t, keys.KeyedVersionBase+fa.Version, ka.Version)
		require.Equal(t, "k", ka.String()[:1])
		require.Equal(t, same && string(sa) == string(sb), ka.Matches(kb), "round %d: %v %v", i, a, b)
		require.False(t, ka.Matches(fa) || fa.Matches(ka), "round %d: a keyed fingerprint matched a plain one", i)
		require.NotEqual(t, fa.Sum, ka.Sum)
		require.Equal(t, ka, ka.Keyed(sb), "keying twice changed a keyed fingerprint")

		listed := secrets[:1+rng.IntN(3)]
		inList := false
		for _, s := range listed {
			inList = inList || string(s) == string(sb)
		}
		require.Equal(t, same && inList, keys.MatchesKeyed(fa, kb, listed), "round %d", i)
		require.Equal(t, same, keys.MatchesKeyed(fa, fb, listed), "round %d: the plain form", i)
		require.False(t, keys.MatchesKeyed(ka, kb, listed) && !ka.Matches(kb), "round %d: a keyed fingerprint was keyed again", i)
	}
}

// Keying needs a secret and a fingerprint: an empty secret or a zero fingerprint keys nothing.
func TestKeyedNeedsASecret(t *testing.T) {
	fp, err := keys.FingerprintOf(map[string]int{"amount": 1})
	require.NoError(t, err)
	require.Equal(t, fp, fp.Keyed(nil))
	require.Equal(t, keys.Fingerprint{}, keys.Fingerprint{}.Keyed([]byte("secret number one, 16+")))
	kf, err := keys.KeyedFingerprintOf([]byte("secret number one, 16+"), map[string]int{"amount": 1})
	require.NoError(t, err)
	require.Equal(t, fp.Keyed([]byte("secret number one, 16+")), kf)
	_, err = keys.KeyedFingerprintOf([]byte("secret number one, 16+"), make(chan int))
	require.ErrorIs(t, err, keys.ErrNotCanonicalizable)
}
