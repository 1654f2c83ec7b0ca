package activity

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"

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
			t.Errorf("explore: history with seed %d failed: %v\n%s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_N=1 go test -v -run TestExploreReceipts ./activity/",
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

// action is what the explorer tells an attempt parked at a point to do.
type action int

const (
	proceed     action = iota
	replyLost          // the statement runs and commits; its reply never arrives
	backendGone        // the backend was terminated before the statement ran

	heartbeatNow // at the heartbeat point: extend the lease
	skip         // at the heartbeat point: do not

	callOK       // the downstream applies the request and answers
	callLost     // it applies the request; the answer is lost
	callNotSent  // the request was never sent (connection refused)
	callInFlight // it holds the request and applies it later; the caller times out
	callDecline  // it declines: a final failure, no effect

	reconcileOK        // the lookup answers
	reconcileNotSent   // the lookup could not connect
	reconcileRefused   // the lookup is refused (a 401), as a non-retryable error
	reconcileAmbiguous // the lookup's connection broke

	lockRow // at a completion: another transaction locks the receipt first, and holds it
)

// point is where an attempt parks: a statement (by name), or "heartbeat", "call", "reconcile".
type event struct {
	a      *explAttempt
	point  string
	args   []any
	resume chan action
	done   bool
}

type explKey struct {
	key       keys.Key
	dedup     bool
	reconcile bool
	retired   bool // its finished receipt was purged: later attempts are beyond the horizon
	forgotten bool // the downstream forgot its token (past its key memory)
	// crashed: a crash lost its asynchronous reservation, and with it the time its token was
	// first sent. Its retries are safe only within the downstream's key memory (the README
	// states this limit), so the explorer does not let that memory pass for it.
	crashed  bool
	payloads [2]keys.Fingerprint
}

type explResult struct {
	Token   string `json:"token"`
	Payload int    `json:"payload"`
	Effect  int    `json:"effect"`
}

type explAttempt struct {
	id      int
	k       *explKey
	payload int
	store   *Store
	events  chan event

	candidate          reservation // the reservation of its last reserve or takeover
	holds              bool        // that reservation took the receipt
	reservation        reservation // the reservation it holds, when holds
	leaseEndedByFault  bool
	lost               bool // its reservation was lost in a crash
	inFn               bool
	heartbeatAfterLoss bool
	called             bool
	zombie             bool // it called although a fault had ended its lease
	// faultOutsideFn: the fault that ended its lease came while it was in the state machine,
	// not in the function: the state machine had the chance to check its lease again.
	faultOutsideFn bool
	storeFault     bool // a statement of its failed or lost its reply

	finished bool
	result   explResult
	err      error
}

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
		for p := range k.payloads {
			k.payloads[p], _ = keys.FingerprintOf(map[string]int{"amount": 100 * (p + 1)})
		}
		x.keys = append(x.keys, k)
		x.logf("key %d: dedup=%v reconcile=%v", i, k.dedup, k.reconcile)
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

// staleAttempt sets up what the guards are for, and leaves the rest to chance: an attempt
// that reached the function is made stale by a fault (its lease ended by the clock, or its
// reservation lost in a crash), another attempt of the key (maybe for another request) runs
// some way, and the stale one wakes.
func (x *explorer) staleAttempt() (err error) {
	k := x.keys[x.rng.IntN(len(x.keys))]
	if err := x.start(k, 0); err != nil {
		return err
	}
	stale := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(stale, 8, "heartbeat", "call"); err != nil {
		return err
	}
	switch x.rng.IntN(3) {
	case 0:
		if err := x.crash(); err != nil {
			return err
		}
	default:
		if err := x.endLease(k, x.rng.IntN(2) == 0); err != nil {
			return err
		}
	}
	payload := 0
	if x.rng.IntN(3) == 0 {
		payload = 1
	}
	if err := x.start(k, payload); err != nil {
		return err
	}
	fresh := x.attempt[len(x.attempt)-1]
	switch x.rng.IntN(3) {
	case 0:
		err = x.runUntil(fresh, 8, "call") // the fresh one in the function when the stale wakes
	case 1:
		err = x.runUntil(fresh, 12, "none") // the fresh one done
	default:
		err = x.runUntil(fresh, x.rng.IntN(8), "none")
	}
	if err != nil {
		return err
	}
	if err := x.runUntil(stale, 8, "none"); err != nil {
		return err
	}
	// A third attempt, while the fresh one may still be running.
	if err := x.start(k, 0); err != nil {
		return err
	}
	return x.runUntil(x.attempt[len(x.attempt)-1], 8, "none")
}

// revivedLease: an attempt's lease ends while it is in the function; another attempt reads the
// receipt and is about to take it over when the first heartbeats, extending its lease again.
func (x *explorer) revivedLease() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	if err := x.start(k, 0); err != nil {
		return err
	}
	first := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(first, 8, "heartbeat"); err != nil {
		return err
	}
	if err := x.endLease(k, x.rng.IntN(2) == 0); err != nil {
		return err
	}
	if err := x.start(k, 0); err != nil {
		return err
	}
	second := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(second, 8, "takeOver"); err != nil {
		return err
	}
	if e, ok := x.parked[first]; ok && e.point == "heartbeat" {
		if err := x.resume(first, heartbeatNow); err != nil {
			return err
		}
		if err := x.runUntil(first, 1, "call"); err != nil {
			return err
		}
	}
	return x.runUntil(second, 8, "none")
}

// releaseWhileRead: a downstream that does not deduplicate, asked by reconciling. An attempt
// paused past its lease wakes and sends its request, which the downstream holds, and releases
// the receipt, just after another attempt read it and decided that the settle time had passed.
func (x *explorer) releaseWhileRead() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	k.dedup, k.reconcile = false, true
	if err := x.start(k, 0); err != nil {
		return err
	}
	first := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(first, 8, "call"); err != nil {
		return err
	}
	if err := x.endLease(k, true); err != nil {
		return err
	}
	if err := x.start(k, 0); err != nil {
		return err
	}
	second := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(second, 8, "takeOver"); err != nil {
		return err
	}
	if e, ok := x.parked[first]; ok && e.point == "call" {
		if err := x.resume(first, callInFlight); err != nil {
			return err
		}
		if err := x.runUntil(first, 4, "none"); err != nil {
			return err
		}
	}
	return x.runUntil(second, 12, "none")
}

// lostReservation: a deduplicating downstream, so reservations commit asynchronously. An
// attempt reaches its call and Postgres crashes, losing its reservation; an attempt for another
// request of the key reserves afresh and may finish; the first wakes and completes, releases or
// heartbeats with the reservation it holds. It must neither write over the new receipt nor
// answer with the other request's result.
func (x *explorer) lostReservation() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	k.dedup = true
	if err := x.start(k, 0); err != nil {
		return err
	}
	stale := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(stale, 8, "heartbeat", "call"); err != nil {
		return err
	}
	if err := x.crash(); err != nil {
		return err
	}
	if err := x.start(k, 1); err != nil {
		return err
	}
	if err := x.runUntil(x.attempt[len(x.attempt)-1], 4+x.rng.IntN(12), "none"); err != nil {
		return err
	}
	return x.runUntil(stale, 12, "none")
}

// crashAfterEffect: an attempt's call reaches the downstream and its worker dies before the
// outcome is recorded; later attempts take over, some fail before sending, time passes.
func (x *explorer) crashAfterEffect() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	if err := x.start(k, 0); err != nil {
		return err
	}
	a := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(a, 8, "call"); err != nil {
		return err
	}
	if _, ok := x.parked[a]; ok {
		if err := x.resume(a, []action{callOK, callLost}[x.rng.IntN(2)]); err != nil {
			return err
		}
		if _, ok := x.parked[a]; ok { // at its completion or release: the worker dies
			if err := x.resume(a, backendGone); err != nil {
				return err
			}
		}
	}
	for range 1 + x.rng.IntN(3) {
		if err := x.endLease(k, x.rng.IntN(3) > 0); err != nil {
			return err
		}
		if x.rng.IntN(2) == 0 {
			if err := x.forget(k); err != nil {
				return err
			}
		}
		if err := x.start(k, 0); err != nil {
			return err
		}
		b := x.attempt[len(x.attempt)-1]
		if err := x.runUntil(b, 12, "call"); err != nil {
			return err
		}
		if _, ok := x.parked[b]; ok && x.rng.IntN(2) == 0 {
			// Its request is never sent: that must not erase what the first may have done.
			if err := x.resume(b, callNotSent); err != nil {
				return err
			}
		}
		if err := x.runUntil(b, 12, "none"); err != nil {
			return err
		}
	}
	return nil
}

// runUntil runs a on with seeded actions until it parks at one of points, finishes, or has
// taken n steps.
func (x *explorer) runUntil(a *explAttempt, n int, points ...string) error {
	for range n {
		e, ok := x.parked[a]
		if !ok || slices.Contains(points, e.point) {
			return nil
		}
		if err := x.resume(a, x.chooseAction(e)); err != nil {
			return err
		}
	}
	return nil
}

func (x *explorer) parkedAttempts() []*explAttempt {
	var out []*explAttempt
	for _, a := range x.attempt { // in start order: deterministic
		if _, ok := x.parked[a]; ok {
			out = append(out, a)
		}
	}
	return out
}

func (x *explorer) chooseAction(e event) action {
	r := x.rng.IntN(100)
	switch e.point {
	case "heartbeat":
		if r < 35 {
			return heartbeatNow
		}
		return skip
	case "call":
		switch {
		case r < 40:
			return callOK
		case r < 60:
			return callLost
		case r < 70:
			return callNotSent
		case r < 90:
			return callInFlight
		}
		return callDecline
	case "reconcile":
		switch {
		case r < 50:
			return reconcileOK
		case r < 67:
			return reconcileNotSent
		case r < 84:
			return reconcileRefused
		}
		return reconcileAmbiguous
	case "read", "countUnresolved":
		if r < 10 {
			return backendGone
		}
		return proceed
	case "completeSkipLocked", "complete":
		if r < 15 {
			return lockRow
		}
	}
	switch {
	case r < 12:
		return replyLost
	case r < 20:
		return backendGone
	}
	return proceed
}

// start runs an attempt of k with request payload in its own store, as another worker would.
// It returns once the attempt has parked or finished.
func (x *explorer) start(k *explKey, payload int) error {
	a := &explAttempt{id: len(x.attempt), k: k, payload: payload, events: x.events}
	s, err := NewStore(x.pool, &Config{Schema: x.schema, InProgressWait: -1, StatementTimeout: time.Minute, LockTimeout: exploreLockTimeout})
	if err != nil {
		return err
	}
	s.receipts = &steppedBatcher{inner: x.pool, a: a, x: x}
	a.store = s
	x.attempt = append(x.attempt, a)
	c := Call{
		Key:                    k.key,
		Fingerprint:            k.payloads[payload],
		Lease:                  exploreLease,
		DownstreamDeduplicates: k.dedup,
		DownstreamSettleTime:   exploreSettle,
		// A retry reads with the plain lookup first; a first attempt reserves at once.
		Attempt: int32(1 + x.rng.IntN(2)),
	}
	if k.retired {
		// A retry after the retention is necessarily one scheduled before it.
		c.ScheduledAt = time.Now().Add(-2 * exploreRetention)
	}
	if k.reconcile {
		c.Reconcile = func(ctx context.Context, tok keys.Token) (any, bool, error) {
			switch a.park("reconcile", nil) {
			case reconcileNotSent:
				return nil, false, NotApplied(errors.New("lookup: dial tcp: connection refused"))
			case reconcileRefused:
				return nil, false, temporal.NewNonRetryableApplicationError("lookup: 401 Unauthorized", "DownstreamRejected", nil)
			case reconcileAmbiguous:
				return nil, false, errors.New("lookup: read: connection reset by peer")
			}
			r, ok := x.down.lookup(tok)
			return r, ok, nil
		}
	}
	x.logf("attempt %d starts: key %s payload %d", a.id, k.key.ID, payload)
	go func() {
		r, err := Do(context.Background(), s, c, func(ctx context.Context) (explResult, error) {
			a.inFn = true
			defer func() { a.inFn = false }()
			if a.park("heartbeat", nil) == heartbeatNow {
				_ = leaseFrom(ctx).extend(ctx, exploreLease)
				if ctx.Err() != nil {
					return explResult{}, context.Cause(ctx)
				}
			}
			tok, _ := keys.TokenFrom(ctx)
			mode := a.park("call", nil)
			return x.down.call(k, tok, payload, mode, a)
		})
		a.result, a.err = r, err
		a.events <- event{a: a, done: true}
	}()
	return x.await(a)
}

// park hands control to the explorer at point and waits to be told what to do.
func (a *explAttempt) park(point string, args []any) action {
	resume := make(chan action)
	a.events <- event{a: a, point: point, args: args, resume: resume}
	return <-resume
}

// await waits for a's next event: a's goroutine is the only one running.
func (x *explorer) await(a *explAttempt) error {
	select {
	case e := <-x.events:
		if e.a != a {
			return fmt.Errorf("attempt %d ran while attempt %d held control", e.a.id, a.id)
		}
		if e.done {
			return x.finished(a)
		}
		x.parked[a] = e
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("attempt %d blocked outside the explorer's points", a.id)
	}
}

func (x *explorer) resume(a *explAttempt, act action) error {
	e := x.parked[a]
	var callErr error
	if e.point == "call" {
		// The call happens now: whatever faults came while it waited here count.
		callErr = x.checkCall(a)
	}
	delete(x.parked, a)
	x.logf("attempt %d at %s: %s", a.id, e.point, actionName(act))
	if act == lockRow {
		if err := x.lock(a.k); err != nil {
			return err
		}
	}
	e.resume <- act
	if err := x.await(a); err != nil {
		return err
	}
	return callErr
}

// checkCall is called when a reaches the downstream call.
func (x *explorer) checkCall(a *explAttempt) error {
	if a.heartbeatAfterLoss {
		return fmt.Errorf("attempt %d calls the downstream after a heartbeat found that it lost the receipt", a.id)
	}
	live := func(b *explAttempt) bool { return !b.finished && !b.leaseEndedByFault && !b.lost }
	for _, b := range x.attempt {
		if b != a && b.k == a.k && b.inFn && live(b) && live(a) {
			return fmt.Errorf("attempts %d and %d of %s run at once, and no fault ended %d's lease", b.id, a.id, a.k.key.ID, b.id)
		}
	}
	a.called = true
	if !a.k.dedup && (a.leaseEndedByFault || a.lost) {
		if a.faultOutsideFn {
			return fmt.Errorf("attempt %d calls a downstream that does not deduplicate after its lease ended while it was outside the function (reconciling), without checking its lease again", a.id)
		}
		a.zombie = true
		x.logf("attempt %d calls although a fault ended its lease", a.id)
	}
	return nil
}

func (x *explorer) finished(a *explAttempt) error {
	a.finished = true
	x.logf("attempt %d finished: %+v, %v", a.id, a.result, a.err)
	if a.err == nil {
		if a.result.Payload != a.payload {
			return fmt.Errorf("attempt %d (request %d) got a result recorded for request %d: %+v", a.id, a.payload, a.result.Payload, a.result)
		}
		if x.successes[a.k] == nil {
			x.successes[a.k] = map[int][]explResult{}
		}
		x.successes[a.k][a.payload] = append(x.successes[a.k][a.payload], a.result)
	}
	if errors.Is(a.err, ErrStore) && !a.storeFault {
		return fmt.Errorf("attempt %d got a store error, though none of its statements failed: %v", a.id, a.err)
	}
	if errors.Is(a.err, ErrPayloadMismatch) && a.called {
		return fmt.Errorf("attempt %d called the downstream and then got a payload mismatch", a.id)
	}
	return nil
}

// drain lets every parked attempt run to its end, without faults, and returns the first
// violation it saw on the way.
func (x *explorer) drain() error {
	first := x.unlockAll() // a completion waiting for a lock would wait out its lease
	for {
		parked := x.parkedAttempts()
		if len(parked) == 0 {
			return first
		}
		for _, a := range parked {
			if err := x.resume(a, cleanAction(x.parked[a].point)); err != nil && first == nil {
				first = err
			}
		}
	}
}

func cleanAction(point string) action {
	switch point {
	case "heartbeat":
		return skip
	case "call":
		return callOK
	case "reconcile":
		return reconcileOK
	}
	return proceed
}

// resolve drives k to a final answer the way Temporal's retries would, once time has passed:
// every held request lands, every lease ends past the settle time, and a clean attempt runs.
func (x *explorer) resolve(k *explKey) error {
	for round := range 5 {
		if err := x.endLease(k, true); err != nil {
			return err
		}
		payload := 0
		if round%2 == 1 {
			payload = 1 // the receipt may hold the other request
		}
		if err := x.start(k, payload); err != nil {
			return err
		}
		if err := x.drain(); err != nil {
			return err
		}
		a := x.attempt[len(x.attempt)-1]
		var appErr *temporal.ApplicationError
		switch {
		case a.err == nil, errors.Is(a.err, ErrPayloadMismatch) && round > 0:
			return nil
		case errors.Is(a.err, ErrPayloadMismatch):
			continue
		case errors.As(toTemporal(a.err), &appErr) && appErr.NonRetryable():
			if !finalTypes[appErr.Type()] {
				return fmt.Errorf("%s ended with a %s error, which is not an outcome of the intent: %v", k.key.ID, appErr.Type(), a.err)
			}
			if errors.Is(a.err, ErrOutcomeUnknown) && k.reconcile {
				return fmt.Errorf("%s ended OutcomeUnknown although a reconcile function could tell: %v", k.key.ID, a.err)
			}
			if errors.Is(a.err, ErrOutcomeUnknown) && k.dedup && !k.forgotten {
				return fmt.Errorf("%s ended OutcomeUnknown although its downstream deduplicates and remembers the token: %v", k.key.ID, a.err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s did not reach a final answer after every lease ended and requests landed", k.key.ID)
}

// finalTypes are the errors that may end an intent: the downstream's own answers, and the
// state machine's refusals. A reconcile function's error (the lookup's 401) is not among them.
var finalTypes = map[string]bool{
	"Declined": true, "DownstreamMismatch": true, ErrTypePayloadMismatch: true, ErrTypeOutcomeUnknown: true, ErrTypeBeyondHorizon: true,
}

func (x *explorer) checkFinal() error {
	ctx := context.Background()
	for _, k := range x.keys {
		tok := k.key.Token()
		// A zombie — an attempt whose lease a fault had ended (a worker paused past its lease)
		// and that then called a downstream that does not deduplicate — cannot be fenced by
		// anything outside the downstream; the README states the limit. Its effects are counted
		// apart, and every other attempt together has at most one.
		zombies := 0
		for a, n := range x.down.by[tok] {
			if a.zombie {
				zombies += n
			}
		}
		if n := x.down.effects[tok] - zombies; n > 1 {
			return fmt.Errorf("%s: %d effects under token %s (and %d by zombies)", k.key.ID, n, tok, zombies)
		}
		for payload, results := range x.successes[k] {
			for _, r := range results[1:] {
				if r != results[0] {
					return fmt.Errorf("%s request %d: results differ between attempts: %+v and %+v", k.key.ID, payload, results[0], r)
				}
			}
			if len(results) > 0 && x.down.effects[tok] == 0 {
				return fmt.Errorf("%s: a result was returned but the downstream has %d effects", k.key.ID, x.down.effects[tok])
			}
		}
	}
	// Unresolved receipts are counted and survive any purge.
	var want int64
	if err := x.pool.QueryRow(ctx, "SELECT count(*) FROM "+x.table()+" WHERE "+unresolved).Scan(&want); err != nil {
		return err
	}
	s, _ := NewStore(x.pool, &Config{Schema: x.schema})
	got, err := s.Unresolved(ctx)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("Unresolved counts %d receipts, %d are unresolved", got, want)
	}
	if err := x.expire("true"); err != nil {
		return err
	}
	for {
		n, err := s.Purge(ctx, 0)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	var left int64
	if err := x.pool.QueryRow(ctx, "SELECT count(*) FROM "+x.table()).Scan(&left); err != nil {
		return err
	}
	if left != want {
		return fmt.Errorf("after the retention, Purge left %d receipts; %d are unresolved and must stay, the rest must go", left, want)
	}
	return nil
}

// endLease moves k's lease into the past, as the database clock moving on would for an attempt
// paused past its lease: just ended, or longer ago than the settle time. Requests the
// downstream holds land before the settle time has passed: that is what a settle time means.
func (x *explorer) endLease(k *explKey, pastSettle bool) error {
	if err := x.unlockAll(); err != nil { // the explorer's own writes must not wait for its locks
		return err
	}
	x.timePasses()
	ago := time.Second
	if pastSettle {
		x.land(k)
		ago = exploreSettle + time.Second
	}
	tag, err := x.pool.Exec(context.Background(), "UPDATE "+x.table()+
		" SET lease_expires_at = now() - $5::bigint * interval '1 microsecond' WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND state = 'pending'",
		k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID, ago.Microseconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		for _, a := range x.attempt {
			if a.k == k && !a.finished {
				a.leaseEndedByFault = true
				a.faultOutsideFn = a.faultOutsideFn || !a.inFn
			}
		}
		x.logf("fault: %s's lease ended %v ago", k.key.ID, ago)
	}
	return nil
}

// crash loses every asynchronous reservation not flushed yet, as a Postgres crash would.
func (x *explorer) crash() error {
	if err := x.unlockAll(); err != nil { // a crash ends every transaction
		return err
	}
	for r := range x.losable {
		tag, err := x.pool.Exec(context.Background(), "DELETE FROM "+x.table()+" WHERE reservation = $1 AND fence = 1 AND state = 'pending'", r.uuid())
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			x.logf("fault: crash lost reservation %x", r[:4])
			for _, a := range x.attempt {
				if a.holds && a.reservation == r {
					a.lost, a.k.crashed = true, true
				}
			}
		}
	}
	clear(x.losable)
	return nil
}

// timePasses: Postgres' WAL writer flushes asynchronous commits within 3 × wal_writer_delay
// (600 ms by default), so once time has passed no reservation is lost in a crash any more.
func (x *explorer) timePasses() { clear(x.losable) }

// purge lets k's retention pass and purges. An unresolved receipt must survive it.
//
// Not while an attempt of k is under way: it would have been paused for the whole retention,
// after the horizon guard let it in (the guard looks at when the activity was scheduled).
func (x *explorer) purge(k *explKey) error {
	ctx := context.Background()
	if x.underWay(k) || !x.purgeQuiet() {
		return nil
	}
	if err := x.unlockAll(); err != nil {
		return err
	}
	var exists bool
	if err := x.pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+x.table()+" WHERE id = $1)", k.key.ID).Scan(&exists); err != nil || !exists {
		return err
	}
	x.timePasses()
	if err := x.expire("id = $1", k.key.ID); err != nil {
		return err
	}
	return x.purgeNow()
}

// underWay reports whether an attempt of k has started and not finished.
func (x *explorer) underWay(k *explKey) bool {
	return slices.ContainsFunc(x.attempt, func(a *explAttempt) bool { return a.k == k && !a.finished })
}

// purgeQuiet reports whether a Purge may run now: no attempt is under way of a key whose
// retention has passed, which would have been paused for that whole retention.
func (x *explorer) purgeQuiet() bool {
	for _, k := range x.keys {
		if !x.underWay(k) {
			continue
		}
		var expired bool
		err := x.pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM "+x.table()+" WHERE id = $1 AND expires_at <= now())", k.key.ID).Scan(&expired)
		if err != nil || expired {
			return false
		}
	}
	return true
}

// purgeNow purges and checks that no receipt went that had to stay (unresolved, or under a live
// lease). A key whose settled receipt went, or may go at the next Purge (its retention passed,
// and its partition is held by another receipt), is retired: later attempts come from beyond
// the horizon.
func (x *explorer) purgeNow() error {
	ctx := context.Background()
	type seen struct {
		state string
		keep  bool // unresolved, or under a live lease
	}
	before := map[*explKey]seen{}
	for _, k := range x.keys {
		var r seen
		err := x.pool.QueryRow(ctx, "SELECT state, coalesce("+unresolved+" OR (state = 'pending' AND lease_expires_at > now()), false) FROM "+x.table()+
			" WHERE id = $1", k.key.ID).Scan(&r.state, &r.keep)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		before[k] = r
	}
	s, _ := NewStore(x.pool, &Config{Schema: x.schema})
	if _, err := s.Purge(ctx, 0); err != nil {
		return err
	}
	for k, r := range before {
		var exists, settled bool
		err := x.pool.QueryRow(ctx, "SELECT true, coalesce("+purgeable+", false) FROM "+x.table()+" WHERE id = $1", k.key.ID).Scan(&exists, &settled)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		switch {
		case !exists && r.keep:
			return fmt.Errorf("purge deleted %s's unresolved or running receipt (state %s)", k.key.ID, r.state)
		case !exists:
			x.logf("fault: retention passed, %s's %s receipt purged", k.key.ID, r.state)
		case settled:
			x.logf("fault: retention passed, %s's %s receipt stays until the next purge", k.key.ID, r.state)
		default:
			continue
		}
		if r.state != StatePending {
			k.retired = true
		}
	}
	return nil
}

// expire lets the retention of the receipts where cond holds pass: their expires_at goes into
// the past and, when the receipts are partitioned, they move into the partition of a day old
// enough for Purge to retire.
func (x *explorer) expire(cond string, args ...any) error {
	if x.partitioned {
		return x.moveOld("expires_at = now() - interval '1 second'", cond, args...)
	}
	_, err := x.pool.Exec(context.Background(), "UPDATE "+x.table()+" SET expires_at = now() - interval '1 second' WHERE "+cond, args...)
	return err
}

// relocate moves k's receipt into the old partition with its retention still running, as if
// it had been written ten days ago and its retention extended, and purges. Purge must move it
// back unchanged — or, under a live lease, leave it where it is — whatever its attempts are
// doing: a move is invisible to the state machine.
func (x *explorer) relocate(k *explKey) error {
	ctx := context.Background()
	if !x.purgeQuiet() {
		return nil
	}
	if err := x.unlockAll(); err != nil {
		return err
	}
	const where = "(namespace, tenant, operation, id) = ($1, $2, $3, $4)"
	args := []any{k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID}
	var before string
	err := x.pool.QueryRow(ctx, "SELECT (to_jsonb(r) - 'bucket' - 'updated_at')::text FROM "+x.table()+" r WHERE "+where+
		" AND expires_at > now()", args...).Scan(&before) // past its retention, a move would be a purge
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := x.moveOld("", where, args...); err != nil {
		return err
	}
	if err := x.purgeNow(); err != nil {
		return err
	}
	var after string
	var live, old bool
	err = x.pool.QueryRow(ctx, "SELECT (to_jsonb(r) - 'bucket' - 'updated_at')::text, coalesce(lease_expires_at > now(), false), coalesce(tableoid = to_regclass($5), false) FROM "+
		x.table()+" r WHERE "+where, append(args, x.oldPartition())...).Scan(&after, &live, &old)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("moving %s's receipt between partitions lost it (it was %s)", k.key.ID, before)
	case err != nil:
		return err
	case after != before:
		return fmt.Errorf("moving %s's receipt between partitions changed it:\n  before %s\n  after  %s", k.key.ID, before, after)
	case old && !live:
		return fmt.Errorf("Purge left %s's receipt in a retired day although no live lease holds it there: %s", k.key.ID, after)
	case !old && live:
		return fmt.Errorf("Purge moved %s's receipt under a live lease", k.key.ID)
	}
	x.logf("fault: %s's receipt moved ten days back and purged (live lease: %v)", k.key.ID, live)
	return nil
}

// moveOld moves the receipts where cond holds into the old partition (creating it when a purge
// dropped it), applying set as well when it is not empty, flagged as Purge flags its own moves
// (moveSetting).
func (x *explorer) moveOld(set, cond string, args ...any) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, x.pool, func(tx pgx.Tx) error {
		old := x.oldPartition()
		from := exploreToday.AddDate(0, 0, -10)
		if _, err := tx.Exec(ctx, "SELECT set_config($1, 'on', true)", moveSetting); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", old).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE TABLE "+old+" PARTITION OF "+x.table()+
				" FOR VALUES FROM ("+pgLiteral(from)+") TO ("+pgLiteral(from.AddDate(0, 0, 1))+")"); err != nil {
				return err
			}
		}
		if set != "" {
			set = ", " + set
		}
		_, err := tx.Exec(ctx, "UPDATE "+x.table()+" SET bucket = "+pgLiteral(from.Add(12*time.Hour))+set+" WHERE "+cond, args...)
		return err
	})
}

// exploreToday is the day the exploration began, which its partitions are laid out from.
var exploreToday = time.Now().UTC().Truncate(24 * time.Hour)

func (x *explorer) oldPartition() string {
	return pgx.Identifier{x.schema, "receipts_explore_old"}.Sanitize()
}

// explorePartitions partitions s's empty receipts table for the explorer: its one partition,
// which holds every day until the day after tomorrow, gives way to one from nine days ago to
// tomorrow, so that moveOld can add a day before it that Purge retires. Purge creates the days
// after it as ever.
func explorePartitions(s *Store) error {
	ctx := context.Background()
	if err := s.Partition(ctx); err != nil {
		return err
	}
	today := exploreToday
	legacy := pgx.Identifier{s.cfg.Schema, "receipts_legacy"}.Sanitize()
	for _, stmt := range []string{
		"ALTER TABLE " + s.table() + " DETACH PARTITION " + legacy,
		"DROP TABLE " + legacy,
		"CREATE TABLE " + pgx.Identifier{s.cfg.Schema, "receipts_explore_recent"}.Sanitize() + " PARTITION OF " + s.table() +
			" FOR VALUES FROM (" + pgLiteral(today.AddDate(0, 0, -9)) + ") TO (" + pgLiteral(today.AddDate(0, 0, 1)) + ")",
	} {
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", firstLine(stmt), err)
		}
	}
	_, err := s.Purge(ctx, 0)
	return err
}

// forget lets the downstream's key memory pass for k's token: its first use becomes older than
// the memory, and a deduplicating downstream forgets it.
//
// Not while an attempt of k holds the receipt: one that already decided to send the token would
// then have been paused for a day between deciding and sending, which no guard can see (the
// README states the limit: a pause longer than the downstream's key memory).
func (x *explorer) forget(k *explKey) error {
	if !k.dedup {
		return nil
	}
	if k.crashed {
		return nil
	}
	for _, a := range x.attempt {
		if a.k == k && a.holds && !a.finished {
			return nil
		}
	}
	if err := x.unlockAll(); err != nil {
		return err
	}
	x.timePasses()
	tag, err := x.pool.Exec(context.Background(), "UPDATE "+x.table()+" SET created_at = now() - interval '25 hours' WHERE id = $1", k.key.ID)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	k.forgotten = true
	x.down.forget(k.key.Token())
	x.logf("fault: the downstream forgot %s's token", k.key.ID)
	return nil
}

// lock has another transaction lock k's receipt row, and hold it until unlockAll: a completion
// that meets it waits out the lock timeout, again and again.
func (x *explorer) lock(k *explKey) error {
	if _, ok := x.locks[k]; ok {
		return nil
	}
	ctx := context.Background()
	tx, err := x.pool.Begin(ctx)
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, "SELECT FROM "+x.table()+" WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) FOR UPDATE",
		k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID)
	if err != nil || tag.RowsAffected() == 0 {
		return errors.Join(err, tx.Rollback(ctx))
	}
	x.locks[k] = tx
	x.logf("fault: another transaction locks %s's receipt", k.key.ID)
	return nil
}

// unlockAll ends the transactions that lock receipts.
func (x *explorer) unlockAll() error {
	var err error
	for k, tx := range x.locks {
		err = errors.Join(err, tx.Rollback(context.Background()))
		delete(x.locks, k)
		x.logf("another transaction lets %s's receipt go", k.key.ID)
	}
	return err
}

// land applies the requests the downstream holds for k.
func (x *explorer) land(k *explKey) {
	if n := x.down.land(k.key.Token(), k.dedup); n > 0 {
		x.logf("the downstream applied %d held request(s) of %s", n, k.key.ID)
	}
}

// statementName names a receipt statement by its SQL.
func (s *Store) statementName(sql string) string {
	for name, stmt := range map[string]string{
		"reserve": s.sql.reserve, "read": s.sql.read, "takeOver": s.sql.takeOver, "complete": s.sql.complete,
		"completeSkipLocked": s.sql.completeSkipLocked, "completeBatch": s.sql.completeBatch, "release": s.sql.release,
		"extend": s.sql.extend, "purge": s.sql.purge, "countUnresolved": s.sql.countUnresolved,
	} {
		if sql == stmt {
			return name
		}
	}
	return "statement"
}

// steppedBatcher parks its attempt before each receipt statement and does what the explorer
// says: run it, run it and lose the reply, or fail as if the backend was terminated.
type steppedBatcher struct {
	inner batcher
	a     *explAttempt
	x     *explorer
}

var errConnectionLost = errors.New("explore: the connection to Postgres was lost")

func (b *steppedBatcher) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	q := batch.QueuedQueries[len(batch.QueuedQueries)-1]
	name := b.a.store.statementName(q.SQL)
	async := batch.QueuedQueries[0].SQL == b.a.store.sql.settingsAsync
	act := b.a.park(name, q.Arguments)
	if b.a.zombie && act != backendGone && (name == "release" || name == "complete" || name == "completeSkipLocked") {
		// It still holds the receipt as it records its outcome: no one took over while it
		// was paused, and its call is on record like any other.
		if current, ok := b.x.currentReservation(b.a.k); ok && current == b.a.reservation {
			b.a.zombie = false
		}
	}
	switch act {
	case backendGone, replyLost:
		b.a.storeFault = true
	}
	if _, locked := b.x.locks[b.a.k]; locked && name != "complete" && name != "completeSkipLocked" {
		// A lock wait past the lock timeout fails a release, heartbeat or takeover with a
		// store error. A completion must not fail so: it writes again until the lock is gone.
		b.a.storeFault = true
	}
	switch act {
	case backendGone:
		return failedResults{errConnectionLost}
	case replyLost:
		res := b.inner.SendBatch(ctx, batch)
		for range batch.QueuedQueries {
			_, _ = res.Exec()
		}
		_ = res.Close()
		b.after(name, q.Arguments, async, false)
		return failedResults{errConnectionLost}
	}
	return &observedResults{BatchResults: b.inner.SendBatch(ctx, batch), after: func() { b.after(name, q.Arguments, async, true) }}
}

// after keeps the explorer's model of who holds what after a statement ran; answered says
// whether the attempt got its reply.
func (b *steppedBatcher) after(name string, args []any, async, answered bool) {
	a, x := b.a, b.x
	switch name {
	case "read", "countUnresolved":
		return // reads commit nothing
	case "reserve":
		a.candidate = reservation(args[7].(pgtype.UUID).Bytes)
	case "takeOver":
		a.candidate = reservation(args[5].(pgtype.UUID).Bytes)
	}
	current, ok := x.currentReservation(a.k)
	took := ok && current == a.candidate
	if name != "reserve" || (took && !async) {
		clear(x.losable) // a durable commit flushes the WAL before it, and every reservation in it
	}
	switch name {
	case "reserve", "takeOver":
		if took {
			a.holds, a.reservation = true, a.candidate
			a.leaseEndedByFault, a.lost, a.faultOutsideFn = false, false, false
			if async && name == "reserve" {
				x.losable[a.candidate] = true
			}
		}
	case "extend":
		switch {
		case !answered || !a.holds:
		case !ok || current != a.reservation:
			a.heartbeatAfterLoss = true
		default:
			a.leaseEndedByFault, a.faultOutsideFn = false, false // its lease is live again
		}
	}
}

func (x *explorer) currentReservation(k *explKey) (reservation, bool) {
	var r pgtype.UUID
	err := x.pool.QueryRow(context.Background(), "SELECT reservation FROM "+x.table()+" WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
		k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID).Scan(&r)
	return r.Bytes, err == nil && r.Valid
}

// observedResults runs after once the caller has read its statement's results.
type observedResults struct {
	pgx.BatchResults
	after func()
}

func (r *observedResults) Close() error {
	err := r.BatchResults.Close()
	r.after()
	return err
}

// failedResults are the results of a batch whose connection broke.
type failedResults struct{ err error }

func (f failedResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedResults) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedResults) QueryRow() pgx.Row                { return failedRow(f) }
func (f failedResults) Close() error                     { return f.err }
func (f failedResults) Tx() pgx.Tx                       { return nil }

type failedRow struct{ err error }

func (f failedRow) Scan(...any) error { return f.err }

// explDownstream is the external system: it deduplicates on the token (per key's choice) or
// applies every request; it can hold a request and apply it later, forget a token, decline.
type explDownstream struct {
	effects  map[keys.Token]int
	by       map[keys.Token]map[*explAttempt]int // effects by the attempt that sent them
	first    map[keys.Token]explResult           // the first effect's answer, which a lookup returns
	memory   map[keys.Token]explResult           // a deduplicating downstream's stored answers
	declined map[keys.Token]bool
	held     map[keys.Token][]heldRequest
	seq      int
}

func newExplDownstream() *explDownstream {
	return &explDownstream{effects: map[keys.Token]int{}, by: map[keys.Token]map[*explAttempt]int{}, first: map[keys.Token]explResult{},
		memory: map[keys.Token]explResult{}, declined: map[keys.Token]bool{}, held: map[keys.Token][]heldRequest{}}
}

// heldRequest is a request the downstream received and applies later.
type heldRequest struct {
	payload int
	from    *explAttempt
}

var errAnswerLost = errors.New("downstream: read: connection reset by peer")

func (d *explDownstream) call(k *explKey, tok keys.Token, payload int, mode action, from *explAttempt) (explResult, error) {
	if mode == callNotSent {
		return explResult{}, NotApplied(errors.New("downstream: dial tcp: connection refused"))
	}
	if k.dedup {
		switch {
		case len(d.held[tok]) > 0:
			return explResult{}, errors.New("downstream: 409 a request with this key is in flight")
		case d.declined[tok]:
			return explResult{}, temporal.NewNonRetryableApplicationError("card declined", "Declined", nil)
		}
		if r, ok := d.memory[tok]; ok {
			if r.Payload != payload {
				return explResult{}, temporal.NewNonRetryableApplicationError("keys can only be reused with the same parameters", "DownstreamMismatch", nil)
			}
			if mode == callLost {
				return explResult{}, errAnswerLost
			}
			return r, nil
		}
	}
	switch mode {
	case callDecline:
		if k.dedup {
			d.declined[tok] = true
		}
		return explResult{}, temporal.NewNonRetryableApplicationError("card declined", "Declined", nil)
	case callInFlight:
		d.held[tok] = append(d.held[tok], heldRequest{payload, from})
		return explResult{}, errors.New("downstream: context deadline exceeded (the request is held)")
	}
	r := d.apply(tok, payload, k.dedup, from)
	if mode == callLost {
		return explResult{}, errAnswerLost
	}
	return r, nil
}

func (d *explDownstream) apply(tok keys.Token, payload int, dedup bool, from *explAttempt) explResult {
	d.seq++
	d.effects[tok]++
	if d.by[tok] == nil {
		d.by[tok] = map[*explAttempt]int{}
	}
	d.by[tok][from]++
	r := explResult{Token: string(tok), Payload: payload, Effect: d.seq}
	if _, ok := d.first[tok]; !ok {
		d.first[tok] = r
	}
	if dedup {
		d.memory[tok] = r
	}
	return r
}

// land applies the requests held for tok and returns how many.
func (d *explDownstream) land(tok keys.Token, dedup bool) int {
	held := d.held[tok]
	delete(d.held, tok)
	for _, h := range held {
		if _, known := d.memory[tok]; dedup && known {
			continue // a deduplicating downstream applies one request per key
		}
		d.apply(tok, h.payload, dedup, h.from)
	}
	return len(held)
}

func (d *explDownstream) lookup(tok keys.Token) (explResult, bool) {
	r, ok := d.first[tok]
	return r, ok
}

func (d *explDownstream) forget(tok keys.Token) { delete(d.memory, tok); delete(d.declined, tok) }

func actionName(a action) string {
	names := []string{"proceed", "reply lost", "backend terminated", "heartbeat", "no heartbeat", "call ok", "call: answer lost",
		"call: not sent", "call: held by the downstream", "call: declined", "reconcile ok", "reconcile: not sent",
		"reconcile: refused", "reconcile: connection reset", "another transaction locks the receipt"}
	if int(a) < len(names) {
		return names[a]
	}
	return strconv.Itoa(int(a))
}
