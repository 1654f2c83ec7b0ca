package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/shard"
)

// TestRouterReadsTheDirectoryOncePerTenantPerMaxStale counts the directory's round trips: a
// routed call costs none of its own while its tenant's answer is fresh, so a Router adds nothing
// to a receipt's round trips; once the answer is MaxStale old, the next call reads it again.
func TestRouterReadsTheDirectoryOncePerTenantPerMaxStale(t *testing.T) {
	ctx := context.Background()
	var trips pgtest.Counter
	dir := pgtest.CountingPool(t, &trips)
	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: pgtest.Schema(t), TenantFences: true})
	require.NoError(t, err)
	newRouter := func(maxStale time.Duration) *shard.Router {
		r, err := shard.NewRouter(shard.Config{Directory: dir, Schema: pgtest.Schema(t),
			Shards: map[string]*activity.Store{"a": store}, Default: "a", MaxStale: maxStale})
		require.NoError(t, err)
		require.NoError(t, r.Migrate(ctx))
		return r
	}

	fresh := newRouter(time.Hour)
	trips.Reset()
	for i := range 100 {
		_, err := fresh.Store(ctx, []string{"acme", "globex", "initech", ""}[i%4])
		require.NoError(t, err)
	}
	require.Equal(t, int64(4), trips.RoundTrips(), "one read per tenant")

	stale := newRouter(time.Nanosecond)
	trips.Reset()
	for range 10 {
		_, err := stale.Store(ctx, "acme")
		require.NoError(t, err)
	}
	require.Equal(t, int64(10), trips.RoundTrips(), "an answer older than MaxStale is read again")
}

// TestConfigNamesTheBadField: each misconfiguration is refused with the field it concerns.
func TestConfigNamesTheBadField(t *testing.T) {
	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{TenantFences: true})
	require.NoError(t, err)
	unfenced, err := activity.NewStore(pgtest.Pool(t), nil)
	require.NoError(t, err)
	dir := pgtest.Pool(t)
	for _, tc := range []struct {
		cfg  shard.Config
		want string
	}{
		{shard.Config{Shards: map[string]*activity.Store{"a": store}, Default: "a"}, "Config.Directory is nil"},
		{shard.Config{Directory: dir, Default: "a"}, "Config.Shards is empty"},
		{shard.Config{Directory: dir, Shards: map[string]*activity.Store{"a": store}, Default: "b"}, `Config.Default "b" is not one of Shards ([a])`},
		{shard.Config{Directory: dir, Shards: map[string]*activity.Store{"a": store, "b": nil}, Default: "a"}, `Config.Shards["b"] is nil`},
		{shard.Config{Directory: dir, Shards: map[string]*activity.Store{"A b": store}, Default: "A b"}, `shard name "A b"`},
		{shard.Config{Directory: dir, Shards: map[string]*activity.Store{"a": store}, Default: "a", MaxStale: -1}, "MaxStale is negative"},
		{shard.Config{Directory: dir, Shards: map[string]*activity.Store{"a": unfenced}, Default: "a"}, `Config.Shards["a"] was opened without activity.Config.TenantFences`},
	} {
		_, err := shard.NewRouter(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}
