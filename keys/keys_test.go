package keys_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

func TestValidation(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]string{
		"Empty":       "",
		"TooLong":     strings.Repeat("x", keys.MaxIDLen+1),
		"NUL":         "a\x00b",
		"Control":     "a\nb",
		"C1Control":   "a\u0085b",
		"InvalidUTF8": "a\xc3\x28b",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := keys.Explicit("default", "", "charge", v)
			require.ErrorIs(t, err, keys.ErrInvalidKey)
			if v != "" {
				_, err = keys.Explicit("default", v, "charge", "order-1")
				require.ErrorIs(t, err, keys.ErrInvalidKey, "tenant %q", v)
			}
		})
	}
	_, err := keys.Explicit("default", "", "charge", "order-1")
	require.NoError(t, err, "the empty tenant means no tenant")
	_, err = keys.Explicit("default", strings.Repeat("t", keys.MaxNameLen+1), "charge", "order-1")
	require.ErrorIs(t, err, keys.ErrInvalidKey)
	k, err := keys.Explicit("default", "acme", "charge", "order-123/charge · ünïcode ✓")
	require.NoError(t, err)
	require.Equal(t, "explicit:order-123/charge · ünïcode ✓", k.ID)
	// The longest explicit ID a caller may give is a valid Key.ID once tagged, and is not hashed.
	k, err = keys.Explicit("default", "", "charge", strings.Repeat("x", keys.MaxIDLen))
	require.NoError(t, err)
	require.Len(t, k.ID, keys.MaxKeyIDLen)
	k.ID += "x"
	require.ErrorIs(t, k.Validate(), keys.ErrInvalidKey)
	var keyErr *keys.InvalidKeyError
	require.ErrorAs(t, keys.Key{Namespace: "default", Operation: "Charge", ID: "x\x00"}.Validate(), &keyErr)
	require.Equal(t, "id", keyErr.Part)
	require.Contains(t, keyErr.Error(), "control character")
}

func TestToken(t *testing.T) {
	t.Parallel()
	k := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "order-123"}
	tok := k.Token()
	require.Len(t, tok.String(), keys.TokenLen)
	require.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-]+$`), tok.String())
	require.Equal(t, tok, k.Token(), "tokens are deterministic")
	// A token pinned by value: changing the derivation would give every in-flight intent a
	// new idempotency key at the provider, so it must be a deliberate, visible change.
	require.Equal(t, keys.Token("3SfXJYT11cOIanV4x55tC17Q3paq7ucXP4sAZly3rn4"), tok)

	// Length-prefixed parts: moving a separator between parts changes the token.
	shifted := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge/order", ID: "123"}
	require.NotEqual(t, tok, shifted.Token())
	require.NotContains(t, tok.String(), "order", "the token leaks the workflow ID")

	u := tok.UUID()
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), u)
	require.Equal(t, u, k.Token().UUID())
	require.NotEqual(t, u, shifted.Token().UUID())
}

func TestCompensation(t *testing.T) {
	t.Parallel()
	fwd := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "wf:order-123/run-1/charge#1"}
	refund, err := fwd.Compensation("Refund")
	require.NoError(t, err)
	again, err := fwd.Compensation("Refund")
	require.NoError(t, err)
	require.Equal(t, refund, again, "compensation keys must be identical on every replay")
	require.NotEqual(t, fwd.Token(), refund.Token())
	require.Equal(t, fwd.Tenant, refund.Tenant)

	notify, err := fwd.Compensation("NotifyCustomer")
	require.NoError(t, err)
	require.NotEqual(t, refund.Token(), notify.Token())

	second := fwd
	second.ID = "wf:order-123/run-1/charge#2"
	refund2, err := second.Compensation("Refund")
	require.NoError(t, err)
	require.NotEqual(t, refund.Token(), refund2.Token(), "two occurrences share a compensation key")

	_, err = fwd.Compensation("bad\x00name")
	require.ErrorIs(t, err, keys.ErrInvalidKey)
	_, err = keys.Key{}.Compensation("Refund")
	require.ErrorIs(t, err, keys.ErrInvalidKey)
}

func TestItem(t *testing.T) {
	t.Parallel()
	batch := keys.Key{Namespace: "default", Tenant: "acme", Operation: "PayOut", ID: "wf:payout-7/0/payout#1"}
	a, err := batch.Item("seller-1")
	require.NoError(t, err)
	again, err := batch.Item("seller-1")
	require.NoError(t, err)
	require.Equal(t, a, again, "an item key must be the same on every attempt")
	require.Equal(t, "item:"+string(batch.Token())+"/seller-1", a.ID)
	require.Equal(t, batch.Operation, a.Operation)
	require.Equal(t, batch.Tenant, a.Tenant)

	b, err := batch.Item("seller-2")
	require.NoError(t, err)
	require.NotEqual(t, a.Token(), b.Token())
	other := batch
	other.ID = "wf:payout-8/0/payout#1"
	c, err := other.Item("seller-1")
	require.NoError(t, err)
	require.NotEqual(t, a.Token(), c.Token(), "two batches share an item key")

	slash, err := batch.Item("a/b")
	require.NoError(t, err)
	require.Equal(t, "item:"+string(batch.Token())+"/a%2Fb", slash.ID, "an item ID's '/' must not read as a separator")
	long, err := batch.Item(strings.Repeat("x", keys.MaxIDLen))
	require.NoError(t, err)
	require.NoError(t, long.Validate())
	require.True(t, strings.HasPrefix(long.ID, "item:sha256:"), long.ID)

	for _, bad := range []string{"", "nul\x00", strings.Repeat("x", keys.MaxIDLen+1)} {
		_, err := batch.Item(bad)
		require.ErrorIs(t, err, keys.ErrInvalidKey, "%q", bad)
	}
	_, err = keys.Key{}.Item("seller-1")
	require.ErrorIs(t, err, keys.ErrInvalidKey)
}
