package keys_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
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
		got, err := keys.Canonicalize([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, string(got), tc.in)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, "\"\xff\"", `{"a":`, `1 2`, ``} {
		_, err := keys.Canonicalize([]byte(bad))
		require.ErrorIs(t, err, keys.ErrNotCanonicalizable, bad)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a, err := keys.FingerprintJSON([]byte(`{"amount":100,"currency":"eur","meta":{"a":1,"b":2}}`))
	require.NoError(t, err)
	b, err := keys.FingerprintJSON([]byte(`{"meta":{"b":2,"a":1.0},"currency":"eur","amount":1e2}`))
	require.NoError(t, err)
	require.Equal(t, a, b, "reordered keys and another spelling of the same number are the same request")
	require.Equal(t, int16(keys.FingerprintVersion), a.Version)

	for _, other := range []string{
		`{"amount":101,"currency":"eur","meta":{"a":1,"b":2}}`,
		`{"amount":100,"currency":"EUR","meta":{"a":1,"b":2}}`,
		`{"amount":100,"currency":"eur","meta":{"a":1,"b":3}}`,
		`{"amount":"100","currency":"eur","meta":{"a":1,"b":2}}`,
		`{"amount":100,"currency":"eur","meta":{"a":1,"b":2},"x":null}`,
	} {
		c, err := keys.FingerprintJSON([]byte(other))
		require.NoError(t, err)
		require.NotEqual(t, a, c, other)
	}
	// No Unicode normalisation: NFC and NFD spellings are different requests.
	nfc, _ := keys.FingerprintOf(map[string]string{"name": "café"})
	nfd, _ := keys.FingerprintOf(map[string]string{"name": "cafe\u0301"})
	require.NotEqual(t, nfc, nfd)

	type order struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
	s, err := keys.FingerprintOf(order{Amount: 100, Currency: "eur"})
	require.NoError(t, err)
	j, err := keys.FingerprintJSON([]byte(`{"currency":"eur","amount":100}`))
	require.NoError(t, err)
	require.Equal(t, s, j)

	_, err = keys.FingerprintOf(make(chan int))
	require.ErrorIs(t, err, keys.ErrNotCanonicalizable)
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e3,"x"]}`, `-0.5e-7`, `[{"a":{"b":null}}]`, `"\u2028"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		canon, err := keys.Canonicalize(raw)
		if err != nil {
			return
		}
		again, err := keys.Canonicalize(canon)
		if err != nil {
			t.Fatalf("canonical form %q does not parse: %v", canon, err)
		}
		if string(again) != string(canon) {
			t.Fatalf("not idempotent: %q -> %q -> %q", raw, canon, again)
		}
	})
}
