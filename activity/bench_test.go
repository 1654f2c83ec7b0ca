package activity_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

// Benchmarks pair each tempotent operation with the bare statement it adds to, measured in the
// same run on the same pool, and report round trips per operation from a pgx tracer
// ("roundtrips/op"): go test -bench . ./activity/. make bench prints the fuller table of the
// bench module, interleaved, against DBOS too; the ratio is what matters, not the absolute time,
// which depends on the machine.

func benchStore(b *testing.B) (*activity.Store, *pgxpool.Pool, *pgtest.Counter, string) {
	b.Helper()
	counter := &pgtest.Counter{}
	pool := pgtest.CountingPool(b, counter)
	schema := pgtest.Schema(b)
	s, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	require.NoError(b, err)
	require.NoError(b, s.Migrate(context.Background()))
	_, err = pool.Exec(context.Background(), `
		CREATE TABLE `+schema+`.bare (id text PRIMARY KEY, body bytea);
		CREATE TABLE `+schema+`.stock (sku text PRIMARY KEY, units bigint NOT NULL);
		CREATE TABLE `+schema+`.shipments (id bigserial PRIMARY KEY, kind text NOT NULL);
		INSERT INTO `+schema+`.stock VALUES ('sku-1', 1000000000);`)
	require.NoError(b, err)
	return s, pool, counter, schema
}

// seq makes every benchmark iteration's key new, across -count repetitions too.
var seq atomic.Int64

func next(prefix string) string { return fmt.Sprint(prefix, seq.Add(1)) }

func benchCall(b *testing.B, id string) activity.Call {
	fp, err := keys.FingerprintOf(map[string]any{"amount": 100, "currency": "eur"})
	require.NoError(b, err)
	return activity.Call{Key: keys.Key{Namespace: "default", Operation: "Charge", ID: id}, Fingerprint: fp}
}

func reportRoundTrips(b *testing.B, c *pgtest.Counter) {
	b.ReportMetric(float64(c.RoundTrips())/float64(b.N), "roundtrips/op")
}

func noop(context.Context) (int, error) { return 1, nil }

// BenchmarkFirstExecution: Do on a new key (reserve + complete) against the bare durable INSERT
// of one row.
func BenchmarkFirstExecution(b *testing.B) {
	s, pool, counter, schema := benchStore(b)
	ctx := context.Background()
	b.Run("bare=insert", func(b *testing.B) {
		counter.Reset()
		for range b.N {
			_, err := pool.Exec(ctx, "INSERT INTO "+schema+".bare VALUES ($1, $2)", next("b-"), []byte("result"))
			require.NoError(b, err)
		}
		reportRoundTrips(b, counter)
	})
	b.Run("tempotent=do", func(b *testing.B) {
		counter.Reset()
		for range b.N {
			_, err := activity.Do(ctx, s, benchCall(b, next("first-")), noop)
			require.NoError(b, err)
		}
		reportRoundTrips(b, counter)
	})
}

// BenchmarkReplay: Do on a completed key against SELECT 1.
func BenchmarkReplay(b *testing.B) {
	s, pool, counter, _ := benchStore(b)
	ctx := context.Background()
	c := benchCall(b, "replayed")
	_, err := activity.Do(ctx, s, c, noop)
	require.NoError(b, err)
	b.Run("bare=select1", func(b *testing.B) {
		counter.Reset()
		for range b.N {
			var one int
			require.NoError(b, pool.QueryRow(ctx, "SELECT 1").Scan(&one))
		}
		reportRoundTrips(b, counter)
	})
	// A first attempt (a reset workflow's) asks the statement that reserves; a retry (attempt 2
	// on, where replays happen) reads with the plain lookup.
	for _, attempt := range []int32{1, 2} {
		c := c
		c.Attempt = attempt
		b.Run(fmt.Sprintf("tempotent=replay/attempt=%d", attempt), func(b *testing.B) {
			counter.Reset()
			for range b.N {
				_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
					b.Fatal("a replay called the function")
					return 0, nil
				})
				require.NoError(b, err)
			}
			reportRoundTrips(b, counter)
		})
	}
}

// BenchmarkDoTx: a stock reservation with an outbox row through DoInNewTx against the same
// transaction without tempotent.
func BenchmarkDoTx(b *testing.B) {
	s, pool, counter, schema := benchStore(b)
	ctx := context.Background()
	business := func(ctx context.Context, tx pgx.Tx) (int64, error) {
		var left int64
		if err := tx.QueryRow(ctx, "UPDATE "+schema+".stock SET units = units - 1 WHERE sku = 'sku-1' RETURNING units").Scan(&left); err != nil {
			return 0, err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+schema+".shipments (kind) VALUES ('ship')")
		return left, err
	}
	b.Run("bare=tx", func(b *testing.B) {
		counter.Reset()
		for range b.N {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := business(ctx, tx)
				return err
			})
			require.NoError(b, err)
		}
		reportRoundTrips(b, counter)
	})
	b.Run("tempotent=dotx", func(b *testing.B) {
		counter.Reset()
		for range b.N {
			_, err := activity.DoInNewTx(ctx, s, benchCall(b, next("tx-")), business)
			require.NoError(b, err)
		}
		reportRoundTrips(b, counter)
	})
}

// TestRoundTripBudget holds the operations to the module DESIGN.md's budget, counted by a pgx tracer: first
// execution 2 round trips (with a durable or an asynchronous reservation), replay 1, DoInNewTx as many
// as the same transaction without tempotent (BEGIN carries the receipt read, COMMIT the INSERT),
// and a DoInNewTx replay 2 (BEGIN with the read, then ROLLBACK).
func TestRoundTripBudget(t *testing.T) {
	t.Parallel()
	counter := &pgtest.Counter{}
	pool := pgtest.CountingPool(t, counter)
	schema := pgtest.Schema(t)
	s, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Migrate(ctx))
	_, err = pool.Exec(ctx, "CREATE TABLE "+schema+".t (id int)")
	require.NoError(t, err)
	fp, err := keys.FingerprintOf("req")
	require.NoError(t, err)
	c := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Op", ID: "1"}, Fingerprint: fp}

	measure := func(f func()) int64 {
		counter.Reset()
		f()
		return counter.RoundTrips()
	}
	require.Equal(t, int64(2), measure(func() { _, err = activity.Do(ctx, s, c, noop); require.NoError(t, err) }), "first execution")
	require.Equal(t, int64(1), measure(func() { _, err = activity.Do(ctx, s, c, noop); require.NoError(t, err) }), "replay")
	dedup := c
	dedup.Key.ID, dedup.DownstreamDeduplicates = "dedup", true
	require.Equal(t, int64(2), measure(func() { _, err = activity.Do(ctx, s, dedup, noop); require.NoError(t, err) }), "first execution, asynchronous reservation")

	write := func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+schema+".t VALUES (1)")
		return 1, err
	}
	bare := measure(func() {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := write(ctx, tx); return err }))
	})
	c.Key.ID = "tx"
	require.Equal(t, bare, measure(func() { _, err = activity.DoInNewTx(ctx, s, c, write); require.NoError(t, err) }), "DoTx")
	require.Equal(t, int64(2), measure(func() { _, err = activity.DoInNewTx(ctx, s, c, write); require.NoError(t, err) }), "DoTx replay")
}
