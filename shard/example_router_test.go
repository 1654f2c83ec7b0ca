package shard_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/shard"
)

// exampleShard makes a database of its own on TEST_DATABASE_URL's server (or the local default)
// and migrates receipts in it; cleanup drops it.
func exampleShard(ctx context.Context, name string) (*activity.Store, *pgxpool.Pool, func()) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	db := pgx.Identifier{name}.Sanitize()
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		panic(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	store, err := activity.NewStore(pool, &activity.Config{TenantFences: true})
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	return store, pool, func() {
		pool.Close()
		_, _ = admin.Exec(ctx, "DROP DATABASE "+db+" WITH (FORCE)")
		admin.Close(ctx)
	}
}

// A Router over two shards, and a tenant moved from one to the other: the retry after the move
// replays the receipt that the old shard recorded, and the charge is not made again.
func ExampleRouter() {
	ctx := context.Background()
	eu1, pool1, cleanup1 := exampleShard(ctx, "example_shard_eu1")
	defer cleanup1()
	eu2, pool2, cleanup2 := exampleShard(ctx, "example_shard_eu2")
	defer cleanup2()

	router, err := shard.NewRouter(shard.Config{
		Directory: pool1, // the directory lives in eu-1's database here
		Shards:    map[string]*activity.Store{"eu-1": eu1, "eu-2": eu2},
		Default:   "eu-1",
		MaxStale:  time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	if err := router.Migrate(ctx); err != nil {
		panic(err)
	}

	charges := 0
	charge := func() (string, error) {
		k, _ := keys.Explicit("default", "acme", "Charge", "order-1")
		s, err := router.Store(ctx, k.Tenant)
		if err != nil {
			return "", err
		}
		return activity.Do(ctx, s, activity.Call{Key: k, Request: "order-1"}, func(context.Context) (string, error) {
			charges++
			return fmt.Sprintf("charge #%d", charges), nil
		})
	}
	out, err := charge()
	fmt.Println(out, err)

	_, err = shard.Move{
		Directory: pool1,
		Shards:    map[string]*pgxpool.Pool{"eu-1": pool1, "eu-2": pool2},
		Tenant:    "acme", To: "eu-2",
		MaxStale: time.Millisecond, // at least the workers' Config.MaxStale
		By:       "ops@example.com", Reason: "TICKET-7: eu-1 is full",
		Log: os.Stdout,
	}.Run(ctx)
	if err != nil {
		panic(err)
	}

	out, err = charge() // Temporal's retry, after the move
	fmt.Println(out, err)
	fmt.Println("charges made:", charges)
	// Output:
	// charge #1 <nil>
	// fenced tenant "acme" on shard "eu-1": its calls are refused (retryably) until it is switched to "eu-2"
	// waiting 1ms for every worker to see the fence (max stale 1ms)
	// copied 1 receipts of tenant "acme" from shard "eu-1" to "eu-2"
	// switched tenant "acme" to shard "eu-2"; its calls go there from now on
	// charge #1 <nil>
	// charges made: 1
}
