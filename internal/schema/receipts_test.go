package schema

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// The value migration 006 gives old void results is the one EncodeResult stores for a void result.
func TestVoidResultIsTheMigrationsValue(t *testing.T) {
	t.Parallel()
	migrations, err := Migrations("tempotent")
	require.NoError(t, err)
	for _, m := range migrations {
		if m.Version == 6 {
			require.Contains(t, m.Up, `'\x`+hex.EncodeToString(VoidResult)+`'`)
			return
		}
	}
	t.Fatal("no migration 006")
}
