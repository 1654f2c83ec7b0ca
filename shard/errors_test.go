package shard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/shard"
)

// TestAsMovedTakesOnlyItsOwnTenantsRefusal: a shard's refusal names the tenant it refused, and
// AsMoved reads it as a move of that tenant only: a refusal of another tenant (a statement that
// carried another tenant's row) never sends a call's tenant to look for a shard it has not moved
// to.
func TestAsMovedTakesOnlyItsOwnTenantsRefusal(t *testing.T) {
	t.Parallel()
	s := twoShards(t)
	_, err := s.pools["a"].Exec(context.Background(), "SELECT tempotent.tenant_moved('other', 'b')")
	require.Error(t, err)

	_, ok := shard.AsMoved(err, "acme")
	require.False(t, ok, "acme was taken as moved on another tenant's refusal: %v", err)
	moved, ok := shard.AsMoved(err, "other")
	require.True(t, ok, "%v", err)
	require.Equal(t, "other", moved.Tenant)
	require.Equal(t, "b", moved.To)

	_, ok = shard.AsMoved(moved, "acme")
	require.False(t, ok, "a MovedError of another tenant was taken as acme's")
	_, ok = shard.AsMoved(moved, "other")
	require.True(t, ok)
}
