package main

import (
	"context"
	"crypto/md5"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// Row 11 (make bench-scale): the receipts table at the volume of a payments company, scaled to
// what this machine holds in minutes. N receipts are written as eight days of traffic (created
// evenly over the last eight days, each kept for seven days after the day it was created), so
// that one day of them — N/8 — has expired. Then:
//
//   - lookup and insert latency against the same statements on an empty table: a replay's plain
//     lookup of a random receipt among the N, and a first execution, each through Do, measured
//     interleaved with the same calls on a table that holds nothing else;
//   - the cost of purging the expired day, two ways: the store's Purge (DELETE in batches of
//     1,000, repeated until nothing is left to delete), against dropping the one partition that
//     holds that day in a copy of the table partitioned by day (native declarative partitioning).
//     For each: the time it took, the WAL it wrote, and the table's size afterwards — what a
//     DELETE leaves behind is dead space that VACUUM makes reusable but never gives back;
//   - what partitioning costs a lookup by key alone, without the partition key: the plain
//     lookup in the partitioned copy (nine partitions to probe) against the plain table.
const (
	scaleSchema       = "tempotent_scale"
	scaleEmptySchema  = "tempotent_scale_empty"
	scaleDays         = 8
	scaleChunk        = 250_000
	scaleLookupSample = 100_000
)

// scaleRows runs row 11 on n receipts.
func scaleRows(ctx context.Context, t *table, rounds, n int, url string) {
	full, empty := openScale(ctx, url, scaleSchema), openScale(ctx, url, scaleEmptySchema)
	defer full.pool.Close()
	defer empty.pool.Close()
	defer func() {
		for _, s := range []string{scaleSchema, scaleEmptySchema} {
			_, _ = full.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
		}
	}()
	result := resultPayload()

	progress("  writing %d receipts over %d days, and the same into a copy partitioned by day", n, scaleDays)
	start := time.Now()
	createPartitioned(ctx, full)
	fill(ctx, full, n, result)
	progress("  written in %v; %s", time.Since(start).Round(time.Second), relationSize(ctx, full, "receipts"))
	for _, table := range []string{"receipts", "receipts_by_day"} {
		if _, err := full.pool.Exec(ctx, "VACUUM ANALYZE "+scaleSchema+"."+table); err != nil {
			fatalf("vacuum: %v", err)
		}
	}

	// Latency at N against an empty table, interleaved.
	lookupKeys := sampleKeys(n)
	emptyKeys := make([]string, 1000) // the empty table's replays need receipts of their own
	for i := range emptyKeys {
		emptyKeys[i] = fmt.Sprint("empty-", i)
		if err := replayAt(empty, emptyKeys[i])(ctx); err != nil {
			fatalf("scale set-up: %v", err)
		}
	}
	s := interleave(ctx, rounds,
		bench{name: "lookup at N", op: replayAmong(full, lookupKeys)},
		bench{name: "lookup, empty table", op: replayAmong(empty, emptyKeys)},
		bench{name: "first execution at N", op: receipt(full.store)},
		bench{name: "first execution, empty table", op: receipt(empty.store)},
		bench{name: "lookup by key, partitioned copy", op: plainLookup(full, "receipts_by_day", lookupKeys)},
		bench{name: "lookup by key, plain table", op: plainLookup(full, "receipts", lookupKeys)})
	label := humanCount(n)
	t.set("11", fmt.Sprintf("replay's lookup, %s receipts ÷ an empty table", label), 0,
		perRound(s, func(r []float64) float64 { return r[0] / r[1] }), ratio, "")
	t.set("11", fmt.Sprintf("replay's lookup at %s receipts, µs", label), 0, median(s[0])/1e3, micros, "")
	t.set("11", fmt.Sprintf("first execution (insert, complete), %s receipts ÷ an empty table", label), 0,
		perRound(s, func(r []float64) float64 { return r[2] / r[3] }), ratio, "")
	t.set("11", fmt.Sprintf("first execution at %s receipts, µs", label), 0, median(s[2])/1e3, micros, "")
	t.set("11", fmt.Sprintf("lookup by key alone, partitioned by day (%d partitions) ÷ unpartitioned", scaleDays+1), 0,
		perRound(s, func(r []float64) float64 { return r[4] / r[5] }), ratio, "")

	// Purge one expired day, both ways.
	expired := countExpired(ctx, full)
	del := measurePurge(ctx, full, "receipts", func() {
		for {
			deleted, err := full.store.Purge(ctx, activity.PurgeBatchDefault)
			if err != nil {
				fatalf("purge: %v", err)
			}
			if deleted == 0 {
				return
			}
		}
	})
	drop := measurePurge(ctx, full, "receipts_by_day", func() {
		if _, err := full.pool.Exec(ctx, "DROP TABLE "+scaleSchema+".receipts_by_day_0"); err != nil {
			fatalf("drop partition: %v", err)
		}
	})
	what := fmt.Sprintf("purge of one expired day (%s receipts)", grouped(expired))
	t.set("11", what+": DELETE in batches, seconds", 0, del.took.Seconds(), seconds, "")
	t.set("11", what+": partition drop, seconds", 0, drop.took.Seconds(), seconds, "")
	t.set("11", what+": DELETE in batches, WAL written", 0, float64(del.wal), bytesOf, "")
	t.set("11", what+": partition drop, WAL written", 0, float64(drop.wal), bytesOf, "")
	t.set("11", what+": table and indexes after DELETE and VACUUM ÷ before", 0, float64(del.after)/float64(del.before), ratio, "")
	t.set("11", what+": table and indexes after the drop ÷ before", 0, float64(drop.after)/float64(drop.before), ratio, "")
}

// openScale is a store with its own pool on schema, migrated afresh.
func openScale(ctx context.Context, url, schema string) *db {
	d := openDB(ctx, url, true)
	store, err := activity.NewStore(d.pool, &activity.Config{Schema: schema, StatementTimeout: time.Minute})
	if err != nil {
		fatalf("store: %v", err)
	}
	d.store = store
	if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		fatalf("drop schema: %v", err)
	}
	if err := store.Migrate(ctx); err != nil {
		fatalf("migrate: %v", err)
	}
	return d
}

// createPartitioned makes receipts_by_day: the receipts table's columns and indexes,
// partitioned by range of created_at, one partition per day of the fill and one ahead. Its
// primary key must include the partition key; see bench/README.md for what that means for
// uniqueness.
func createPartitioned(ctx context.Context, d *db) {
	var b strings.Builder
	fmt.Fprintf(&b, `CREATE TABLE %[1]s.receipts_by_day (LIKE %[1]s.receipts INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
		PARTITION BY RANGE (created_at);
	ALTER TABLE %[1]s.receipts_by_day ADD PRIMARY KEY (namespace, tenant, operation, id, created_at);
	CREATE INDEX ON %[1]s.receipts_by_day (expires_at);
	CREATE INDEX ON %[1]s.receipts_by_day (token);
	CREATE INDEX ON %[1]s.receipts_by_day (workflow_id) WHERE workflow_id IS NOT NULL;
	CREATE INDEX ON %[1]s.receipts_by_day (compensates) WHERE compensates IS NOT NULL;
	`, scaleSchema)
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -scaleDays)
	for i := range scaleDays + 1 {
		fmt.Fprintf(&b, "CREATE TABLE %[1]s.receipts_by_day_%[2]d PARTITION OF %[1]s.receipts_by_day FOR VALUES FROM ('%[3]s') TO ('%[4]s');\n",
			scaleSchema, i, day.AddDate(0, 0, i).Format(time.RFC3339), day.AddDate(0, 0, i+1).Format(time.RFC3339))
	}
	if _, err := d.pool.Exec(ctx, b.String()); err != nil {
		fatalf("create the partitioned copy: %v", err)
	}
}

// fill writes n receipts into both tables, in chunks, two at a time. Receipt i was created
// i/n of the way through the eight days that ended at midnight (UTC), and is kept until the
// eighth midnight after it was created — seven full days after the day it was created — so that
// exactly the first day, the first partition, has expired.
func fill(ctx context.Context, d *db, n int, result []byte) {
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -scaleDays)
	span := time.Duration(scaleDays) * 24 * time.Hour
	chunks := make(chan [2]int)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for c := range chunks {
				for _, table := range []string{"receipts", "receipts_by_day"} {
					_, err := d.pool.Exec(ctx, fmt.Sprintf(`
INSERT INTO %[1]s.%[2]s (namespace, tenant, operation, id, token, fingerprint, fingerprint_version, state, result,
	created_at, updated_at, completed_at, expires_at, workflow_id, run_id, activity_id, activity_type, reservation)
SELECT 'scale', '', 'Charge', 'order-' || g || '/charge', 'tok-' || md5(g::text), decode(md5(g::text) || md5(g::text), 'hex'), 1,
	'completed', $3, t, t, t, date_trunc('day', t, 'UTC') + interval '8 days', 'order-' || g, 'run-' || g, '5', 'Charge', gen_random_uuid()
FROM generate_series($1::bigint, $2::bigint) AS g,
	LATERAL (SELECT $4::timestamptz + (g::float8 / $5) * $6::bigint * interval '1 microsecond' AS t) AS x`, scaleSchema, table),
						c[0], c[1], result, day, float64(n), span.Microseconds())
					if err != nil {
						fatalf("fill %s: %v", table, err)
					}
				}
			}
		})
	}
	for from := 0; from < n; from += scaleChunk {
		chunks <- [2]int{from, min(from+scaleChunk, n) - 1}
		if from > 0 && from%(4*scaleChunk) == 0 {
			progress("    %s of %s", humanCount(from), humanCount(n))
		}
	}
	close(chunks)
	wg.Wait()
}

// resultPayload is what each filled receipt records: a charge, as the payload Do stores.
func resultPayload() []byte {
	p, err := converter.GetDefaultDataConverter().ToPayload(charge{ID: "ch_1", Status: "succeeded"})
	if err != nil {
		fatalf("payload: %v", err)
	}
	b, err := proto.Marshal(p)
	if err != nil {
		fatalf("payload: %v", err)
	}
	return b
}

// sampleKeys are IDs of receipts among the n, spread over all of them.
func sampleKeys(n int) []string {
	ids := make([]string, min(n, scaleLookupSample))
	for i := range ids {
		ids[i] = fmt.Sprint(rand.IntN(n))
	}
	return ids
}

// scaleCall is the call of filled receipt g: its fingerprint is what the fill recorded.
func scaleCall(g string) activity.Call {
	sum := md5.Sum([]byte(g))
	var fp keys.Fingerprint
	fp.Version = 1
	copy(fp.Sum[:16], sum[:])
	copy(fp.Sum[16:], sum[:])
	return activity.Call{Key: keys.Key{Namespace: "scale", Operation: "Charge", ID: "order-" + g + "/charge"}, Fingerprint: fp,
		DownstreamDeduplicates: true, Attempt: 2}
}

// replayAt records receipt g on the (empty) table, as the fill would have.
func replayAt(d *db, g string) op {
	return func(ctx context.Context) error {
		_, err := activity.Do(ctx, d.store, scaleCall(g), func(context.Context) (charge, error) {
			return charge{ID: "ch_1", Status: "succeeded"}, nil
		})
		return err
	}
}

// replayAmong replays a random receipt among ids: a retry's plain lookup, through Do.
func replayAmong(d *db, ids []string) op {
	return func(ctx context.Context) error {
		_, err := activity.Do(ctx, d.store, scaleCall(ids[rand.IntN(len(ids))]), func(context.Context) (charge, error) {
			return charge{}, fmt.Errorf("a replay called the downstream")
		})
		return err
	}
}

// plainLookup reads a random receipt among ids from table by its key alone.
func plainLookup(d *db, table string, ids []string) op {
	stmt := fmt.Sprintf(`SELECT state, result FROM %s.%s WHERE (namespace, tenant, operation, id) = ('scale', '', 'Charge', $1)`, scaleSchema, table)
	return func(ctx context.Context) error {
		var (
			state  string
			result []byte
		)
		return d.pool.QueryRow(ctx, stmt, "order-"+ids[rand.IntN(len(ids))]+"/charge").Scan(&state, &result)
	}
}

func countExpired(ctx context.Context, d *db) int64 {
	var n int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+scaleSchema+".receipts WHERE expires_at <= now()").Scan(&n); err != nil {
		fatalf("count: %v", err)
	}
	return n
}

// purgeCost is what one way of purging cost: its time, the WAL it wrote, and the size of the
// table with its indexes before, and after (and after a VACUUM).
type purgeCost struct {
	took          time.Duration
	wal           int64
	before, after int64
}

func measurePurge(ctx context.Context, d *db, table string, purge func()) purgeCost {
	var c purgeCost
	c.before = totalSize(ctx, d, table)
	lsn := walPosition(ctx, d)
	start := time.Now()
	purge()
	c.took = time.Since(start)
	c.wal = walPosition(ctx, d) - lsn
	if _, err := d.pool.Exec(ctx, "VACUUM "+scaleSchema+"."+table); err != nil {
		fatalf("vacuum: %v", err)
	}
	c.after = totalSize(ctx, d, table)
	return c
}

// totalSize is the table's size with its indexes and TOAST, its partitions' included.
func totalSize(ctx context.Context, d *db, table string) int64 {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) + coalesce((SELECT sum(pg_total_relation_size(relid))
	FROM pg_partition_tree($1::regclass) WHERE relid <> $1::regclass), 0)`, pgx.Identifier{scaleSchema, table}.Sanitize()).Scan(&n)
	if err != nil {
		fatalf("size: %v", err)
	}
	return n
}

func relationSize(ctx context.Context, d *db, table string) string {
	return fmt.Sprintf("%s is %.1f GB with its indexes", table, float64(totalSize(ctx, d, table))/1e9)
}

func walPosition(ctx context.Context, d *db) int64 {
	var n int64
	if err := d.pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").Scan(&n); err != nil {
		fatalf("WAL position: %v", err)
	}
	return n
}

// grouped writes 41747 as "41,747".
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// humanCount writes 10000000 as "10M" and 250000 as "250k".
func humanCount(n int) string {
	switch {
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}
