package engine

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/schema"
)

// The value migration 006 gives old void results is the one outcome stores for a void result.
func TestVoidResultIsTheMigrationsValue(t *testing.T) {
	t.Parallel()
	migrations, err := schema.Migrations("tempotent")
	require.NoError(t, err)
	for _, m := range migrations {
		if m.Version == 6 {
			require.Contains(t, m.Up, `'\x`+hex.EncodeToString(voidResult)+`'`)
			return
		}
	}
	t.Fatal("no migration 006")
}
