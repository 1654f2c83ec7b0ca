// The seeded explorer of Do's receipt state machine (TestExploreReceipts): the test, its
// seeds and lengths, the explorer's state, and the run loop of a history (history, step).

package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

// TestExploreReceipts explores the receipt state machine of Do on the real Postgres, by model:
// seeded histories of concurrent attempts over a few keys — same and different requests,
// downstreams that deduplicate on the token and downstreams that do not, with and without a
// reconcile function — with faults injected between every pair of statements: a statement's
// reply lost after it committed, the backend terminated before it ran, a Postgres crash that
// loses the asynchronous reservations not yet flushed, a lease ended by the database clock
// (short of and past the downstream's settle time, as for an attempt paused past its lease),
// heartbeats, a purge after the retention, the downstream forgetting a token after its key
// memory, a request held by the downstream and applied later, reconcile errors of every kind,
// and a receipt locked by another transaction past the lock timeout just as an attempt records
// its outcome (held for any number of steps, until the explorer lets it go).
//
// The attempts run one statement at a time under a scheduler that the history's seed drives,
// so a history is replayed exactly by its seed. After each history every attempt is drained,
// every key driven to a final answer as Temporal's retries would, and these invariants checked:
//
//   - at most one effect per token, whether the downstream deduplicates or not;
//   - no caller gets a result recorded for another request, and every result for one request
//     of a key is the same (a replay is the first execution's result);
//   - never two attempts of a key in the function under live leases (one may run on only after
//     a fault ended its lease), and an attempt that learned on a heartbeat that it lost the
//     receipt calls nothing more;
//   - a mismatched request calls nothing;
//   - an intent ends OutcomeUnknown only when nothing could have told (a downstream that does
//     not deduplicate, or a token past its key memory, with no reconcile function);
//   - no receipt is left unresolved without being counted by Unresolved, and Purge keeps them;
//   - an attempt gets a store error only when one of its statements failed: a completion that
//     meets its receipt locked past the lock timeout keeps its result and writes it once the
//     lock is gone (or learns that it was fenced out), it does not give up.
//
// With TEMPOTENT_TEST_PARTITIONED set (make test runs the package both ways), the receipts are
// partitioned by day (Store.Partition) and the retention passes by moving receipts into a
// partition ten days old, which Purge retires; and receipts are also moved there at any moment,
// even between two statements of an attempt, with their retention still running, for Purge to
// move back: one more invariant holds there, that a move changes nothing of a receipt but
// where it lives, and keeps a receipt under a live lease where it is.
//
// It runs TEMPOTENT_EXPLORE_N histories (default 300: about fifteen seconds, fifty partitioned)
// from TEMPOTENT_EXPLORE_SEED (default 1); a failing history prints its seed, and
// TEMPOTENT_EXPLORE_SEED=<seed> TEMPOTENT_EXPLORE_N=1 replays it alone (make explore SEED=<seed>
// N=1, with -v for its trace; PARTITIONED=1 for the partitioned table).
//
// Each guard of the state machine, removed by hand, makes the default run fail (it prints the
// failing seeds): the reservation identity and fingerprint in complete, the reservation in
// release and extend, the fingerprint check of a fenced-out attempt's answer, the lease
// condition of the takeover, a reconcile error handled as an outcome, the settle wait before
// reconcile, the key memory of a deduplicating downstream, the cancellation on a heartbeat that
// extends nothing, Purge deleting unresolved receipts, and a NotApplied error erasing an earlier
// attempt's possible effect; partitioned, a retiring day that moves receipts under live leases
// or is dropped while it holds a receipt it must keep. make explore N=3000 runs a long
// exploration.
func TestExploreReceipts(t *testing.T) {
	n := envInt("TEMPOTENT_EXPLORE_N", 300)
	seed := uint64(envInt("TEMPOTENT_EXPLORE_SEED", 1))
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	setupStore, err := NewStore(pool, &Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := setupStore.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	partitioned := os.Getenv("TEMPOTENT_TEST_PARTITIONED") != ""
	if partitioned {
		if err := explorePartitions(setupStore); err != nil {
			t.Fatal(err)
		}
	}
	var failed []uint64
	for i := range uint64(n) {
		s := seed + i
		x := newExplorer(t, pool, schema, s)
		x.partitioned = partitioned
		if err := x.history(); err != nil {
			failed = append(failed, s)
			t.Errorf("explore: history with seed %d failed: %v\n%s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_N=1 go test -v -run TestExploreReceipts ./internal/engine/",
				s, err, x.trace(), s)
			if len(failed) >= 3 {
				break
			}
		}
	}
	if len(failed) == 0 {
		t.Logf("explore: %d histories from seed %d, every invariant held", n, seed)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// Lengths in a history. Leases never end on their own: only the explorer's faults end them.
const (
	exploreLease     = time.Hour
	exploreSettle    = time.Hour
	exploreAttempts  = 12
	exploreSteps     = 90
	exploreRetention = 7 * 24 * time.Hour
	// exploreLockTimeout is short: a statement that meets a receipt the explorer holds locked
	// (lockRow) gives up soon, and the explorer goes on.
	exploreLockTimeout = 20 * time.Millisecond
)

type explorer struct {
	t       *testing.T
	pool    *pgxpool.Pool
	schema  string
	seed    uint64
	rng     *rand.Rand
	events  chan event
	keys    []*explKey
	down    *explDownstream
	attempt []*explAttempt
	parked  map[*explAttempt]event
	losable map[reservation]bool // asynchronous reservations not flushed yet
	log     []string
	// burst bounds how many points one attempt runs on at a time: 1 interleaves attempts
	// statement by statement; more lets some get far while others wait.
	burst int
	// successes are the results returned per key and request, for the replay invariant.
	successes map[*explKey]map[int][]explResult
	// partitioned: the receipts are partitioned by day (explorePartitions).
	partitioned bool
	// locks are the transactions that hold a key's receipt locked (lockRow) until unlockAll.
	locks map[*explKey]pgx.Tx
}

func newExplorer(t *testing.T, pool *pgxpool.Pool, schema string, seed uint64) *explorer {
	return &explorer{
		t: t, pool: pool, schema: schema, seed: seed,
		rng:       rand.New(rand.NewPCG(seed, 0x7e3907e47)),
		events:    make(chan event),
		down:      newExplDownstream(),
		parked:    map[*explAttempt]event{},
		losable:   map[reservation]bool{},
		successes: map[*explKey]map[int][]explResult{},
		locks:     map[*explKey]pgx.Tx{},
	}
}

func (x *explorer) logf(format string, args ...any) {
	x.log = append(x.log, fmt.Sprintf(format, args...))
}

func (x *explorer) trace() string {
	if !testing.Verbose() {
		return "(run with -v for the history's trace)"
	}
	return "trace:\n  " + strings.Join(x.log, "\n  ")
}

func (x *explorer) table() string { return pgx.Identifier{x.schema, "receipts"}.Sanitize() }

// history runs one seeded history and checks the invariants; it returns the first violation.
func (x *explorer) history() (err error) {
	ctx := context.Background()
	if _, err := x.pool.Exec(ctx, "TRUNCATE "+x.table()); err != nil {
		return err
	}
	nkeys := 1 + x.rng.IntN(3)
	x.burst = 1
	if x.rng.IntN(10) < 3 {
		x.burst = 5
	}
	for i := range nkeys {
		k := &explKey{
			key:       keys.Key{Namespace: "explore", Operation: "Charge", ID: fmt.Sprintf("seed-%d/key-%d", x.seed, i)},
			dedup:     x.rng.IntN(5) < 2,
			reconcile: x.rng.IntN(5) < 3,
		}
		k.batch = k.dedup && x.rng.IntN(2) == 0
		for p := range k.payloads {
			k.payloads[p], _ = keys.FingerprintOf(map[string]int{"amount": 100 * (p + 1)})
		}
		x.keys = append(x.keys, k)
		x.logf("key %d: dedup=%v reconcile=%v batch=%v", i, k.dedup, k.reconcile, k.batch)
	}
	defer func() {
		// Whatever happened, let every attempt finish, so that no goroutine outlives the test.
		if derr := x.drain(); err == nil {
			err = derr
		}
	}()

	// Half the histories begin with a scene that the guards are for; the rest is chance.
	scenes := []func() error{x.staleAttempt, x.revivedLease, x.crashAfterEffect, x.releaseWhileRead, x.lostReservation}
	if i := x.rng.IntN(2 * len(scenes)); i < len(scenes) {
		if err := scenes[i](); err != nil {
			return err
		}
	}
	for step := 0; step < exploreSteps; step++ {
		if err := x.step(); err != nil {
			return err
		}
	}
	if err := x.drain(); err != nil {
		return err
	}
	for _, k := range x.keys {
		if err := x.resolve(k); err != nil {
			return err
		}
	}
	return x.checkFinal()
}

// step takes one seeded choice: resume a parked attempt (with or without a fault), start an
// attempt, or inject a fault of the world.
func (x *explorer) step() error {
	if len(x.locks) > 0 && x.rng.IntN(4) == 0 {
		return x.unlockAll()
	}
	parked := x.parkedAttempts()
	k := x.keys[x.rng.IntN(len(x.keys))]
	switch r := x.rng.IntN(100); {
	case r < 50 && len(parked) > 0:
		// Run one attempt a few points on: attempts that get far while others wait are the
		// stale ones that the guards are for.
		a := parked[x.rng.IntN(len(parked))]
		for range 1 + x.rng.IntN(x.burst) {
			e, ok := x.parked[a]
			if !ok {
				break
			}
			if err := x.resume(a, x.chooseAction(e)); err != nil {
				return err
			}
		}
		return nil
	case r < 65 && len(x.attempt) < exploreAttempts:
		payload := 0
		if x.rng.IntN(6) == 0 {
			payload = 1
		}
		return x.start(k, payload)
	case r < 70:
		return x.endLease(k, false)
	case r < 78:
		return x.endLease(k, true)
	case r < 83:
		return x.crash()
	case r < 86:
		return x.purge(k)
	case r < 90:
		return x.forget(k)
	case r < 95:
		x.land(k)
	case r < 99 && x.partitioned:
		return x.relocate(k)
	}
	return nil
}
