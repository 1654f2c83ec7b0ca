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
	"github.com/tempotent/tempotent/operator"
)

// Row 11 (make bench-scale): the receipts table at the volume of a payments company, scaled to
// what this machine holds in minutes. N receipts are written as eight days of traffic (created
// evenly over the last eight days, each kept for seven days after the day it was created), so
// that one day of them — N/8 — has expired, into two stores: one with the plain table, one
// partitioned by day as operator.Client.Partition makes it (eight days of partitions and those
// ahead). Then:
//
//   - lookup and insert latency: a replay's plain lookup of a random receipt among the N, and a
//     first execution, each through Do, on both tables, measured interleaved with the same calls
//     on a table that holds nothing else. On the partitioned table a lookup probes every
//     partition (the key alone does not say which day), and an insert runs the trigger that keeps
//     a key unique across them;
//   - the cost of purging the expired day, two ways, both through operator.Client.Purge: DELETE in
//     batches of 1,000 on the plain table, against retiring the day's partition on the
//     partitioned one. For each: the time it took, the WAL it wrote, and the table's size
//     afterwards — what a DELETE leaves behind is dead space that VACUUM makes reusable but
//     never gives back;
//   - what operator.Client.Partition costs on the plain table that is left, with receipts being
//     replayed throughout: how long it took, and the longest a replay waited meanwhile.
const (
	scaleSchema       = "tempotent_scale"
	scalePartSchema   = "tempotent_scale_part"
	scaleEmptySchema  = "tempotent_scale_empty"
	scaleDays         = 8
	scaleChunk        = 250_000
	scaleLookupSample = 100_000
)

// scaleRows runs row 11 on n receipts.
func scaleRows(ctx context.Context, t *table, rounds, n int, url string) {
	full, part, empty := openScale(ctx, url, scaleSchema), openScale(ctx, url, scalePartSchema), openScale(ctx, url, scaleEmptySchema)
	defer func() {
		for _, s := range []string{scaleSchema, scalePartSchema, scaleEmptySchema} {
			_, _ = full.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
		}
		for _, d := range []*db{full, part, empty} {
			d.pool.Close()
		}
	}()
	result := resultPayload()

	progress("  writing %d receipts over %d days, into the plain table and into one partitioned by day", n, scaleDays)
	start := time.Now()
	partitionByPastDays(ctx, part)
	fill(ctx, full, scaleSchema, n, result)
	fill(ctx, part, scalePartSchema, n, result)
	progress("  written in %v; %s", time.Since(start).Round(time.Second), relationSize(ctx, full, scaleSchema))
	for _, schema := range []string{scaleSchema, scalePartSchema} {
		if _, err := full.pool.Exec(ctx, "VACUUM ANALYZE "+schema+".receipts"); err != nil {
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
		bench{name: "lookup at N, partitioned", op: replayAmong(part, lookupKeys)},
		bench{name: "first execution at N, partitioned", op: receipt(part.store)})
	label := humanCount(n)
	t.set("11", fmt.Sprintf("replay's lookup, %s receipts ÷ an empty table", label), 0,
		perRound(s, func(r []float64) float64 { return r[0] / r[1] }), ratio, "")
	t.set("11", fmt.Sprintf("replay's lookup at %s receipts, µs", label), 0, median(s[0])/1e3, micros, "")
	t.set("11", fmt.Sprintf("first execution (insert, complete), %s receipts ÷ an empty table", label), 0,
		perRound(s, func(r []float64) float64 { return r[2] / r[3] }), ratio, "")
	t.set("11", fmt.Sprintf("first execution at %s receipts, µs", label), 0, median(s[2])/1e3, micros, "")
	partitions := countPartitions(ctx, part)
	t.set("11", fmt.Sprintf("replay's lookup, partitioned by day (%d partitions) ÷ unpartitioned", partitions), 0,
		perRound(s, func(r []float64) float64 { return r[4] / r[0] }), ratio, "")
	t.set("11", "first execution, partitioned (the uniqueness trigger) ÷ unpartitioned", 0,
		perRound(s, func(r []float64) float64 { return r[5] / r[2] }), ratio, "")

	// Purge one expired day, both ways.
	expired := countExpired(ctx, full)
	del := measurePurge(ctx, full, scaleSchema, func() {
		for {
			deleted, err := operatorOn(full, 0).Purge(ctx, operator.PurgeBatchDefault)
			if err != nil {
				fatalf("purge: %v", err)
			}
			if deleted == 0 {
				return
			}
		}
	})
	before := partitions
	drop := measurePurge(ctx, part, scalePartSchema, func() {
		if _, err := retiringOperator(part).Purge(ctx, 0); err != nil {
			fatalf("purge the partitioned table: %v", err)
		}
	})
	if after := countPartitions(ctx, part); after != before-1 {
		fatalf("purge of the partitioned table left %d partitions of %d; it should have retired one", after, before)
	}
	what := fmt.Sprintf("purge of one expired day (%s receipts)", grouped(expired))
	t.set("11", what+": DELETE in batches, seconds", 0, del.took.Seconds(), seconds, "")
	t.set("11", what+": partition retired, seconds", 0, drop.took.Seconds(), seconds, "")
	t.set("11", what+": DELETE in batches, WAL written", 0, float64(del.wal), bytesOf, "")
	t.set("11", what+": partition retired, WAL written", 0, float64(drop.wal), bytesOf, "")
	t.set("11", what+": table and indexes after DELETE and VACUUM ÷ before", 0, float64(del.after)/float64(del.before), ratio, "")
	t.set("11", what+": table and indexes after the retirement ÷ before", 0, float64(drop.after)/float64(drop.before), ratio, "")

	// Convert what is left of the plain table, with replays running.
	left := humanCount(n - int(expired))
	var live []string // the receipts the purge left: not of the first day
	for _, g := range lookupKeys {
		if i, _ := strconv.Atoi(g); i >= n/scaleDays+1 {
			live = append(live, g)
		}
	}
	took, waited := measurePartition(ctx, full, live)
	t.set("11", fmt.Sprintf("Store.Partition on %s receipts, seconds", left), 0, took.Seconds(), seconds, "")
	t.set("11", fmt.Sprintf("Store.Partition on %s receipts: longest replay meanwhile, ms", left), 0, float64(waited.Microseconds())/1e3, millis, "")
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

// partitionByPastDays partitions d's (empty) receipts with operator.Client.Partition, then puts in place of
// the legacy partition one partition per UTC day of the fill, named as Purge names the days ahead,
// as if the table had been partitioned for weeks.
func partitionByPastDays(ctx context.Context, d *db) {
	if err := operatorOn(d, 0).Partition(ctx); err != nil {
		fatalf("partition: %v", err)
	}
	var firstAhead time.Time
	if err := d.pool.QueryRow(ctx, `SELECT (regexp_match(pg_get_expr(relpartbound, oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz
		FROM pg_class WHERE oid = $1::regclass`, scalePartSchema+".receipts_legacy").Scan(&firstAhead); err != nil {
		fatalf("read the legacy partition's bound: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "DROP TABLE %s.receipts_legacy;\n", scalePartSchema)
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -scaleDays)
	for from := day; from.Before(firstAhead); from = from.AddDate(0, 0, 1) {
		fmt.Fprintf(&b, "CREATE TABLE %[1]s.receipts_%[2]s PARTITION OF %[1]s.receipts FOR VALUES FROM ('%[3]s') TO ('%[4]s');\n",
			scalePartSchema, from.Format("20060102"), from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339))
	}
	if _, err := d.pool.Exec(ctx, b.String()); err != nil {
		fatalf("partition by past days: %v", err)
	}
}

// operatorOn is an operator client on d's receipts, with the store's statement timeout and the
// given retention (the default when zero).
func operatorOn(d *db, retention time.Duration) *operator.Client {
	c := d.store.Config()
	op, err := operator.NewClient(d.pool, operator.Config{Schema: c.Schema, StatementTimeout: c.StatementTimeout, Retention: retention})
	if err != nil {
		fatalf("operator: %v", err)
	}
	return op
}

// retiringOperator is an operator client on d's receipts with a retention that makes Purge
// retire the first day of the fill, and no other: a day is retired once the retention and a
// day's grace have passed since it ended, and the first day ended seven days before today's
// midnight, the second six.
func retiringOperator(d *db) *operator.Client {
	sinceMidnight := time.Since(time.Now().UTC().Truncate(24 * time.Hour))
	return operatorOn(d, 6*24*time.Hour+sinceMidnight-12*time.Hour)
}

func countPartitions(ctx context.Context, d *db) int {
	var n int
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass", scalePartSchema+".receipts").Scan(&n); err != nil {
		fatalf("count partitions: %v", err)
	}
	return n
}

// measurePartition converts d's receipts with operator.Client.Partition while a goroutine replays receipts
// among ids, and returns how long the conversion took and the longest replay meanwhile.
func measurePartition(ctx context.Context, d *db, ids []string) (took, longest time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		replay := replayAmong(d, ids)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if err := replay(ctx); err != nil {
				fatalf("replay during Partition: %v", err)
			}
			longest = max(longest, time.Since(start))
		}
	})
	start := time.Now()
	err := operatorOn(d, 0).Partition(ctx)
	took = time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		fatalf("partition: %v", err)
	}
	return took, longest
}

// fill writes n receipts into schema's receipts, in chunks, two at a time. Receipt i was created
// i/n of the way through the eight days that ended at midnight (UTC), and is kept until the
// eighth midnight after it was created — seven full days after the day it was created — so that
// exactly the first day, the first partition, has expired. On a partitioned table, bucket is
// when it was created, and the uniqueness trigger is off (its setting), as it is for Purge's
// moves: the fill's keys are unique by construction.
func fill(ctx context.Context, d *db, schema string, n int, result []byte) {
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -scaleDays)
	span := time.Duration(scaleDays) * 24 * time.Hour
	partitioned, err := operatorOn(d, 0).Partitioned(ctx)
	if err != nil {
		fatalf("fill: %v", err)
	}
	bucket := ""
	if partitioned {
		bucket = ", bucket"
	}
	stmt := fmt.Sprintf(`
INSERT INTO %[1]s.receipts (namespace, tenant, operation, id, token, fingerprint, fingerprint_version, state, result,
	created_at, updated_at, completed_at, expires_at, workflow_id, run_id, activity_id, activity_type, reservation%[2]s)
SELECT 'scale', '', 'Charge', 'order-' || g || '/charge', 'tok-' || md5(g::text), decode(md5(g::text) || md5(g::text), 'hex'), 1,
	'completed', $3, t, t, t, date_trunc('day', t, 'UTC') + interval '8 days', 'order-' || g, 'run-' || g, '5', 'Charge', gen_random_uuid()%[3]s
FROM generate_series($1::bigint, $2::bigint) AS g,
	LATERAL (SELECT $4::timestamptz + (g::float8 / $5) * $6::bigint * interval '1 microsecond' AS t) AS x`,
		schema, bucket, strings.ReplaceAll(bucket, "bucket", "t"))
	chunks := make(chan [2]int)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for c := range chunks {
				err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SELECT set_config('tempotent.move', 'on', true)"); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, stmt, c[0], c[1], result, day, float64(n), span.Microseconds())
					return err
				})
				if err != nil {
					fatalf("fill %s: %v", schema, err)
				}
			}
		})
	}
	for from := 0; from < n; from += scaleChunk {
		chunks <- [2]int{from, min(from+scaleChunk, n) - 1}
		if from > 0 && from%(4*scaleChunk) == 0 {
			progress("    %s: %s of %s", schema, humanCount(from), humanCount(n))
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

func measurePurge(ctx context.Context, d *db, schema string, purge func()) purgeCost {
	var c purgeCost
	c.before = totalSize(ctx, d, schema)
	lsn := walPosition(ctx, d)
	start := time.Now()
	purge()
	c.took = time.Since(start)
	c.wal = walPosition(ctx, d) - lsn
	if _, err := d.pool.Exec(ctx, "VACUUM "+schema+".receipts"); err != nil {
		fatalf("vacuum: %v", err)
	}
	c.after = totalSize(ctx, d, schema)
	return c
}

// totalSize is the size of schema's receipts with their indexes and TOAST, partitions included.
func totalSize(ctx context.Context, d *db, schema string) int64 {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) + coalesce((SELECT sum(pg_total_relation_size(relid))
	FROM pg_partition_tree($1::regclass) WHERE relid <> $1::regclass), 0)`, pgx.Identifier{schema, "receipts"}.Sanitize()).Scan(&n)
	if err != nil {
		fatalf("size: %v", err)
	}
	return n
}

func relationSize(ctx context.Context, d *db, schema string) string {
	return fmt.Sprintf("%s.receipts is %.1f GB with its indexes", schema, float64(totalSize(ctx, d, schema))/1e9)
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
