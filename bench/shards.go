package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/shard"
)

// Row 12: receipts across shards. Two Postgres clusters of their own (initdb on two ports, made
// alike, on this machine's disk and cores), each a shard; 16 workers write receipts of 16
// tenants through a shard.Router, either with every tenant on shard a, or half of them moved to
// b. The floor is the same measured with a bare durable INSERT: 16 workers on cluster a, against
// 8 on each cluster — what a second server gives this machine at all. The target is that the
// receipts gain at least 0.8 of what the bare INSERTs gain: the Router costs the receipts none
// of what a second server brings (it reads the directory once per tenant per MaxStale, not per
// call; shard's tests count it). On a machine whose cores both clusters share, neither gains
// much: the figure that matters is the ratio of the two gains.
//
// Also the Router's own cost: receipts/s through a Router on one shard against the same
// store called directly.
const shardTenants = 16

func shardRows(ctx context.Context, t *table, rounds int) {
	pools := map[string]*pgxpool.Pool{}
	stores := map[string]*activity.Store{}
	for _, name := range []string{"a", "b"} {
		dir, err := os.MkdirTemp("", "tempotent-bench-shard-")
		if err != nil {
			fatalf("row 12: %v", err)
		}
		defer os.RemoveAll(dir)
		srv, err := pgtest.NewCluster(ctx, dir, "shared_buffers=128MB", "max_connections=100")
		if err != nil {
			fatalf("row 12: %v", err)
		}
		defer srv.Stop()
		cfg, err := pgxpool.ParseConfig(srv.URL)
		if err != nil {
			fatalf("row 12: %v", err)
		}
		cfg.MaxConns = 32
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			fatalf("row 12: %v", err)
		}
		defer pool.Close()
		s, err := activity.NewStore(pool, &activity.Config{TenantFences: true})
		if err != nil {
			fatalf("row 12: %v", err)
		}
		if err := s.Migrate(ctx); err != nil {
			fatalf("row 12: %v", err)
		}
		if _, err := pool.Exec(ctx, "CREATE TABLE bare (id text PRIMARY KEY, body bytea NOT NULL)"); err != nil {
			fatalf("row 12: %v", err)
		}
		pools[name], stores[name] = pool, s
	}
	router := func(schema string, moved bool) *shard.Router {
		r, err := shard.NewRouter(shard.Config{Directory: pools["a"], Schema: schema, Shards: stores, Default: "a"})
		if err != nil {
			fatalf("row 12: %v", err)
		}
		if err := r.Migrate(ctx); err != nil {
			fatalf("row 12: %v", err)
		}
		for i := 0; moved && i < shardTenants; i += 2 {
			// As a finished move leaves the directory (the move itself is shard's tests').
			if _, err := pools["a"].Exec(ctx, "INSERT INTO "+schema+".tenants (tenant, shard) VALUES ($1, 'b')", tenantOf(i)); err != nil {
				fatalf("row 12: %v", err)
			}
		}
		return r
	}
	one, two := router("bench_one_shard", false), router("bench_two_shards", true)

	s := interleave(ctx, rounds,
		bench{name: "receipts, one shard", op: routed(one), workers: 16},
		bench{name: "receipts, two shards", op: routed(two), workers: 16},
		bench{name: "INSERTs, one cluster", op: bareInsert(pools["a"], pools["a"]), workers: 16},
		bench{name: "INSERTs, two clusters", op: bareInsert(pools["a"], pools["b"]), workers: 16},
		bench{name: "receipts, the store alone", op: receipt(stores["a"]), workers: 16},
	)
	gain := func(r []float64) float64 { return r[0] / r[1] }
	floor := func(r []float64) float64 { return r[2] / r[3] }
	t.set("12", "receipts/s, 16 workers, two shards ÷ one shard", 0, perRound(s, gain), ratio, "")
	t.set("12", "floor: durable INSERTs/s, 16 workers, two clusters ÷ one", 0, perRound(s, floor), ratio, "")
	t.set("12", "the receipts' gain from a second shard ÷ the INSERTs' gain from a second cluster", 0,
		perRound(s, func(r []float64) float64 { return gain(r) / floor(r) }), ratio, "≥ 0.8")
	t.set("12", "receipts/s, two shards", 0, 1e9/median(s[1]), perSecond, "")
	t.set("12", "receipts/s through a Router on one shard ÷ the store alone", 0,
		perRound(s, func(r []float64) float64 { return r[4] / r[0] }), ratio, "")
}

func tenantOf(i int) string { return fmt.Sprint("tenant-", i%shardTenants) }

var shardSeq atomic.Int64

// routed is a first execution through r, for the next of the tenants in turn.
func routed(r *shard.Router) op {
	return func(ctx context.Context) error {
		n := shardSeq.Add(1)
		tenant := tenantOf(int(n))
		s, err := r.Store(ctx, tenant)
		if err != nil {
			return err
		}
		c := call(fmt.Sprint("shard-", n))
		c.Key = keys.Key{Namespace: c.Key.Namespace, Tenant: tenant, Operation: c.Key.Operation, ID: c.Key.ID}
		_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) { return 1, nil })
		return err
	}
}

// bareInsert is a durable INSERT on even's pool for even calls and odd's for odd ones: with two
// clusters, half the workers' INSERTs on each.
func bareInsert(even, odd *pgxpool.Pool) op {
	return func(ctx context.Context) error {
		n := shardSeq.Add(1)
		p := even
		if n%2 == 1 {
			p = odd
		}
		_, err := p.Exec(ctx, "INSERT INTO bare VALUES ($1, $2)", fmt.Sprint("row-", n), []byte(`{"id":"ch_1"}`))
		return err
	}
}
