package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/console"
	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/webhook"
	"github.com/tempotent/tempotent/worker"
)

// purgeEnv is the part of a worker's Env that purging uses, on a migrated schema of its own
// (no Temporal: PurgeRound needs none). met counts what the purger sends.
func purgeEnv(t *testing.T, schema string, inboxRetention time.Duration, met *counters) *worker.Env {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, migrate.Up(ctx, pgtest.Pool(t), schema))
	var h client.MetricsHandler = client.MetricsNopHandler
	if met != nil {
		h = met
	}
	// A long lock timeout: TestPurgeRoundInboxTakesTurns holds the inbox table's lock for a while.
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema, MetricsHandler: h, LockTimeout: time.Minute, StatementTimeout: time.Minute})
	require.NoError(t, err)
	return &worker.Env{Config: worker.Config{InboxRetention: inboxRetention}.WithDefaults(), Pool: pgtest.Pool(t), Operator: op}
}

// record puts consumer's record of id, processed age ago.
func record(t *testing.T, schema, consumer, id string, age time.Duration) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(),
		"INSERT INTO "+pgx.Identifier{schema, "inbox"}.Sanitize()+" (consumer, message_id, processed_at) VALUES ($1, $2, now() - $3::bigint * interval '1 microsecond')",
		consumer, id, age.Microseconds())
	require.NoError(t, err)
}

// left returns the records left, as "consumer|id".
func left(t *testing.T, schema string) map[string]bool {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT consumer || '|' || message_id FROM "+pgx.Identifier{schema, "inbox"}.Sanitize())
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// The worker purges the expired records of every consumer of the schema, inboxes' and webhook
// handlers' alike, without being told their names, and keeps the others: a duplicate of a kept
// message is still acknowledged without running.
func TestPurgeRoundInboxOfEveryConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	met := &counters{}
	env := purgeEnv(t, schema, 0, met) // InboxRetentionDefault: 30 days
	day := 24 * time.Hour
	for _, c := range []string{"billing", "shipping", "webhook/stripe"} {
		record(t, schema, c, "old", 31*day)
		record(t, schema, c, "older", 90*day)
		record(t, schema, c, "recent", 29*day)
		record(t, schema, c, "new", time.Minute)
	}

	purged, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, worker.Purged{Inbox: 6}, purged)
	require.Equal(t, int64(6), met.get(worker.MetricInboxPurged))
	want := map[string]bool{}
	for _, c := range []string{"billing", "shipping", "webhook/stripe"} {
		want[c+"|recent"], want[c+"|new"] = true, true
	}
	require.Equal(t, want, left(t, schema))

	// What the consumers see: a kept record still deduplicates; a purged one is forgotten.
	ib, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "billing", Schema: schema, Retention: 30 * day})
	require.NoError(t, err)
	for id, again := range map[string]bool{"recent": false, "old": true} {
		ran, err := ib.Process(ctx, inbox.Message{ID: id}, func(context.Context, pgx.Tx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, again, ran, "message %s", id)
	}

	// A negative InboxRetention leaves inbox records to their owners.
	off := purgeEnv(t, schema, -1, nil)
	record(t, schema, "billing", "ancient", 365*day)
	purged, ran, err = off.PurgeRound(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, purged.Inbox)
	require.True(t, left(t, schema)["billing|ancient"])
}

// Two workers purge the same schema at once: the one that takes the lock runs its round, the
// other reports that it did not run, and runs once the first is done.
func TestPurgeRoundInboxTakesTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	first, second := purgeEnv(t, schema, 0, nil), purgeEnv(t, schema, 0, nil)
	for i := range 10 {
		record(t, schema, "billing", fmt.Sprint(i), 31*24*time.Hour)
	}

	// Hold the first round inside its inbox purge, with the schema's purge lock taken, by
	// holding the inbox table's lock.
	release, waiting := lockInbox(t, schema)
	defer release()
	var (
		wg          sync.WaitGroup
		firstPurged worker.Purged
		firstRan    bool
		firstErr    error
	)
	wg.Go(func() { firstPurged, firstRan, firstErr = first.PurgeRound(ctx) })
	require.Eventually(t, waiting, 10*time.Second, 10*time.Millisecond, "the first round never reached the inbox")

	// The second round must not get as far as the table: if it did, it would wait there (the
	// operator's lock_timeout does not cover the wait while its statement is parsed).
	secondCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	purged, ran, err := second.PurgeRound(secondCtx)
	require.NoError(t, err)
	require.False(t, ran, "purged while the other worker's round held the schema's purge lock")
	require.Zero(t, purged)

	release()
	wg.Wait()
	require.NoError(t, firstErr)
	require.True(t, firstRan)
	require.Equal(t, worker.Purged{Inbox: 10}, firstPurged)

	purged, ran, err = second.PurgeRound(ctx)
	require.NoError(t, err)
	require.True(t, ran, "the first round kept the purge lock")
	require.Zero(t, purged)
}

// lockInbox holds schema's inbox table locked until release (safe to call twice), and returns
// it with waiting, which reports whether a statement waits for that lock. The blocker and the
// observer have connections of their own: a round holds two of the shared pool's, and other
// tests' rounds may hold the rest.
func lockInbox(t *testing.T, schema string) (release func(), waiting func() bool) {
	t.Helper()
	ctx := context.Background()
	blockerConn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = blockerConn.Close(ctx) })
	observer, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = observer.Close(ctx) })
	blocker, err := blockerConn.Begin(ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(ctx, "LOCK TABLE "+pgx.Identifier{schema, "inbox"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	release = func() { _ = blocker.Rollback(ctx) }
	waiting = func() bool {
		var waits bool
		err := observer.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'inbox' AND NOT l.granted)`, schema).Scan(&waits)
		if err != nil {
			t.Log(err)
		}
		return err == nil && waits
	}
	return release, waiting
}

// A round purges in batches until a short one: exactly a batch needs a second, empty one, and a
// batch and one record a second of one record; each is purged whole.
func TestPurgeRoundInboxBatchBoundary(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1000, 1001} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := pgtest.Schema(t)
			env := purgeEnv(t, schema, time.Hour, nil)
			_, err := pgtest.Pool(t).Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "inbox"}.Sanitize()+
				" (consumer, message_id, processed_at) SELECT 'c' || (i % 3), i::text, now() - interval '2 hours' FROM generate_series(1, $1) i", n)
			require.NoError(t, err)
			record(t, schema, "c0", "kept", 59*time.Minute)

			purged, ran, err := env.PurgeRound(ctx)
			require.NoError(t, err)
			require.True(t, ran)
			require.Equal(t, int64(n), purged.Inbox)
			require.Equal(t, map[string]bool{"c0|kept": true}, left(t, schema))
		})
	}
}

// Whatever the consumers, their retentions and their records' ages, a purge never deletes a
// record inside its consumer's retention (each at most the worker's InboxRetention, as its
// documentation requires), and deletes every record older than InboxRetention. Seeded; a
// failure names its seed.
func TestPurgeRoundInboxNeverInsideRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := 24 * time.Hour
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("Seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 40))
			schema := pgtest.Schema(t)
			workerRetention := time.Duration(1+rng.IntN(40)) * day
			env := purgeEnv(t, schema, workerRetention, nil)
			// Ages a minute or more from workerRetention, so that the seconds between seeding and
			// purging decide nothing.
			age := func(max time.Duration) time.Duration {
				for {
					a := time.Duration(rng.Int64N(int64(max)))
					if d := a - workerRetention; d > time.Minute || d < -time.Minute {
						return a
					}
				}
			}
			consumers := map[string]time.Duration{}
			for i := range 1 + rng.IntN(6) {
				name := fmt.Sprint("consumer-", i)
				if rng.IntN(3) == 0 {
					name = "webhook/source-" + fmt.Sprint(i)
				}
				// Retentions up to the worker's, one of them equal to it.
				consumers[name] = time.Duration(1 + rng.Int64N(int64(workerRetention)))
				if i == 0 {
					consumers[name] = workerRetention
				}
			}
			mustStay, wantLeft := map[string]bool{}, map[string]bool{}
			for name, retention := range consumers {
				for j := range rng.IntN(60) {
					a := age(3 * workerRetention)
					if j%5 == 0 { // just inside its retention
						a = max(retention-time.Minute-time.Duration(rng.Int64N(int64(time.Hour))), 0)
					}
					id := fmt.Sprint(j)
					record(t, schema, name, id, a)
					if a < retention-time.Second {
						mustStay[name+"|"+id] = true
					}
					if a < workerRetention {
						wantLeft[name+"|"+id] = true
					}
				}
			}

			_, ran, err := env.PurgeRound(ctx)
			require.NoError(t, err)
			require.True(t, ran)
			got := left(t, schema)
			for k := range mustStay {
				require.True(t, got[k], "seed %d: record %s was purged inside its consumer's retention (consumers %v, worker %v)", seed, k, consumers, workerRetention)
			}
			require.Equal(t, wantLeft, got, "seed %d: records past the worker's InboxRetention %v were left", seed, workerRetention)
		})
	}
}

// InboxRetentionDefault covers the default retention of every owner of inbox records.
func TestInboxRetentionDefault(t *testing.T) {
	t.Parallel()
	require.Equal(t, max(inbox.RetentionDefault, webhook.RetentionDefault), worker.InboxRetentionDefault)
	require.Equal(t, worker.InboxRetentionDefault, worker.Config{}.WithDefaults().InboxRetention)
	require.Equal(t, worker.InboxRetentionDefault, console.InboxRetentionDefault, "the console holds inbox records to another retention than the worker's")
	require.ErrorContains(t, worker.Config{InboxRetention: time.Second}.WithDefaults().Validate(), "inbox retention 1s is under a minute")
	require.NoError(t, worker.Config{InboxRetention: -1}.WithDefaults().Validate())
}

// counters is a metrics handler that sums each counter by name.
type counters struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *counters) get(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *counters) WithTags(map[string]string) client.MetricsHandler { return c }
func (c *counters) Counter(name string) client.MetricsCounter        { return counter{c, name} }
func (c *counters) Gauge(string) client.MetricsGauge                 { return client.MetricsNopHandler.Gauge("") }
func (c *counters) Timer(string) client.MetricsTimer                 { return client.MetricsNopHandler.Timer("") }

type counter struct {
	c    *counters
	name string
}

func (k counter) Inc(n int64) {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if k.c.n == nil {
		k.c.n = map[string]int64{}
	}
	k.c.n[k.name] += n
}
