// Command bench measures what tempotent costs per step and prints one table (make bench): each
// figure a ratio against the bare operation, or against DBOS Transact for Go running the same
// step, measured interleaved in this one run, with synchronous commit on (the headline) and off.
//
// It lives in a module of its own so that DBOS never reaches the library's go.mod. It needs the
// Postgres of TEST_DATABASE_URL (default the local one) and, for the end-to-end rows, the
// temporal CLI that make bin/temporal installs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
)

func main() {
	testing.Init()
	rounds := flag.Int("rounds", 7, "interleaved rounds per figure; each figure is the median of its rounds")
	blockTime := flag.Duration("block", 100*time.Millisecond, "length of one measured block")
	e2eBlock := flag.Duration("e2e-block", 400*time.Millisecond, "length of one block of workflows")
	only := flag.String("rows", "1,2,3,4,5,6,7", "the table's rows to measure (1–3 go together)")
	cli := flag.String("temporal-cli", "../bin/temporal", "the temporal CLI for the dev server (make bin/temporal)")
	flag.Parse()
	want := func(row string) bool { return slices.Contains(strings.Split(*only, ","), row) }
	url := pgtest.URL()
	ctx := context.Background()
	setBlock(*blockTime)

	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintln(os.Stderr, "bench:", r)
			os.Exit(1)
		}
	}()

	t := &table{}
	start := time.Now()
	d := startDownstream()
	defer d.server.Close()
	for _, syncCommit := range []bool{true, false} {
		col := map[bool]int{true: 0, false: 1}[syncCommit]
		progress("synchronous_commit %s", map[bool]string{true: "on", false: "off"}[syncCommit])
		db := openDB(ctx, url, syncCommit)
		if syncCommit {
			prepare(ctx, db)
		}
		if want("1") || want("2") || want("3") {
			progress("  single steps")
			singleSteps(ctx, t, col, *rounds, db, d)
		}
		if want("4") {
			progress("  receipts per second")
			throughput(ctx, t, col, *rounds, db)
		}
		if want("7") {
			progress("  DBOS Transact")
			againstDBOS(ctx, t, col, *rounds, url, syncCommit, db, d)
		}
		if syncCommit && want("5") {
			progress("  racing duplicates")
			races(ctx, t, db.store, d)
		}
		db.pool.Close()
	}
	if want("6") {
		progress("end to end on the Temporal dev server")
		setBlock(*e2eBlock)
		endToEnd(ctx, t, *rounds, url, *cli, d)
	}

	cleanup := openDB(ctx, url, true)
	_, _ = cleanup.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	cleanup.pool.Close()
	t.print(os.Stdout, *rounds, time.Since(start))
}

func setBlock(d time.Duration) {
	if err := flag.Set("test.benchtime", d.String()); err != nil {
		fatalf("set benchtime: %v", err)
	}
}

func progress(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// singleSteps: rows 1–3, one call at a time. The first execution is set against the physical
// floor of a receipt: a round trip to check, the same downstream call, a durable INSERT to record
// (floor). Both are measured as a whole, call included, because a statement sent after an
// external call costs more than one sent straight after another (the database's and the
// client's processes have gone idle meanwhile); measuring SELECT 1 and INSERT back to back
// would understate the floor.
func singleSteps(ctx context.Context, t *table, col, rounds int, db *db, d *downstream) {
	benches := []bench{
		{name: "first execution", op: firstStep(db.store, d)},
		{name: "bare call", op: bareCall(d)},
		{name: "floor", op: floor(db.pool, d)},
		{name: "SELECT 1", op: selectOne(db.pool)},
		{name: "replay", op: replay(db.store, d)},
		{name: "DoInNewTx", op: doTx(db.store)},
		{name: "bare transaction", op: bareTx(db.pool)},
	}
	s := interleave(ctx, rounds, benches...)
	const first, call, flr, sel, rep, dotx, tx = 0, 1, 2, 3, 4, 5, 6
	t.set("1", "first execution: overhead over the bare call ÷ the floor's (check + durable INSERT)", col,
		perRound(s, func(r []float64) float64 { return (r[first] - r[call]) / (r[flr] - r[call]) }), ratio, "")
	t.set("1", "first execution: overhead over the bare call, µs", col,
		perRound(s, func(r []float64) float64 { return (r[first] - r[call]) / 1e3 }), micros, "")
	t.set("1", "the floor's overhead over the bare call, µs", col,
		perRound(s, func(r []float64) float64 { return (r[flr] - r[call]) / 1e3 }), micros, "")
	t.set("2", "replay ÷ SELECT 1", col, perRound(s, func(r []float64) float64 { return r[rep] / r[sel] }), ratio, "≤ 1.3")
	t.set("3", "DoInNewTx ÷ the same transaction without tempotent", col,
		perRound(s, func(r []float64) float64 { return r[dotx] / r[tx] }), ratio, "≤ 1.1")

	stats := db.pool
	c := count(ctx, stats, db.counter, 200, firstStep(db.store, d))
	t.set("1", "first execution: round trips per call", col, c.roundTrips, number, "≤ 2")
	t.setJudged("1", "first execution: WAL syncs per call", col, c.walSyncs, number, "≤ 1", 1)
	c = count(ctx, stats, db.counter, 200, firstStepNoDedup(db.store, d))
	t.setJudged("1", "first execution, downstream that does not deduplicate: WAL syncs per call", col, c.walSyncs, number, "", 1)
	c = count(ctx, stats, db.counter, 200, benches[rep].op)
	t.set("2", "replay: round trips", col, c.roundTrips, number, "= 1")
	t.setJudged("2", "replay: WAL syncs", col, c.walSyncs, number, "= 0", 1)
	bareTxCosts := count(ctx, stats, db.counter, 200, benches[tx].op)
	c = count(ctx, stats, db.counter, 200, benches[dotx].op)
	t.set("3", "DoInNewTx: round trips, more than the bare transaction's", col, c.roundTrips-bareTxCosts.roundTrips, number, "")
}

// throughput: row 4, receipts per second from concurrent workers against bare durable INSERTs.
func throughput(ctx context.Context, t *table, col, rounds int, db *db) {
	for _, workers := range []int{1, 4, 16} {
		s := interleave(ctx, rounds,
			bench{name: "receipts", op: receipt(db.store), workers: workers},
			bench{name: "INSERTs", op: insert(db.pool), workers: workers})
		target := ""
		if workers == 16 {
			target = "≥ 0.9"
		}
		t.set("4", fmt.Sprintf("receipts/s ÷ durable INSERTs/s, %d workers", workers), col,
			perRound(s, func(r []float64) float64 { return r[1] / r[0] }), ratio, target)
		t.set("4", fmt.Sprintf("receipts/s, %d workers", workers), col, 1e9/median(s[0]), perSecond, "")
	}
}

// againstDBOS: row 7 (and row 1's ratio to it), ten steps in a row through each.
func againstDBOS(ctx context.Context, t *table, col, rounds int, url string, syncCommit bool, db *db, d *downstream) {
	p := startPeer(ctx, url, syncCommit, d)
	defer p.close()
	const steps = 10
	ours := func(ctx context.Context) error {
		for range steps {
			if err := firstStep(db.store, d)(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	bare := func(ctx context.Context) error {
		for range steps {
			if err := bareCall(d)(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	s := interleave(ctx, rounds,
		bench{name: "tempotent, 10 steps", op: ours},
		bench{name: "DBOS, 10 steps", op: p.workflow(steps)},
		bench{name: "10 bare calls", op: bare})
	t.set("7", "tempotent step overhead ÷ DBOS step overhead", col,
		perRound(s, func(r []float64) float64 { return (r[0] - r[2]) / (r[1] - r[2]) }), ratio, "≤ 0.5")
	t.set("7", "DBOS step overhead over the bare call, µs", col,
		perRound(s, func(r []float64) float64 { return (r[1] - r[2]) / steps / 1e3 }), micros, "")
	t.set("7", "tempotent step overhead over the bare call, µs", col,
		perRound(s, func(r []float64) float64 { return (r[0] - r[2]) / steps / 1e3 }), micros, "")
	c := count(ctx, db.pool, p.counter, 20, p.workflow(steps))
	t.set("7", "DBOS round trips per step", col, c.roundTrips/steps, number, "")
	t.set("7", "DBOS WAL syncs per step", col, c.walSyncs/steps, number, "")
}

// races: row 5. K goroutines run the same intent at once, as duplicates do when Temporal
// retries an attempt that is still running; a loser told InProgress retries after the delay it
// was given, as Temporal would.
func races(ctx context.Context, t *table, s *activity.Store, d *downstream) {
	const trials = 5
	for _, k := range []int{2, 16, 64} {
		var (
			worst   int
			waits   []float64
			longest float64
		)
		race(ctx, s, d, k) // untimed: lets the pool open the connections K goroutines need
		for range trials {
			effects, w := race(ctx, s, d, k)
			worst = max(worst, effects)
			for _, x := range w {
				waits = append(waits, x)
				longest = max(longest, x)
			}
		}
		t.set("5", fmt.Sprintf("K = %d racing one key: effects (worst of %d)", k, trials), 0, float64(worst), number, "= 1")
		t.set("5", fmt.Sprintf("K = %d: losers' wait beyond the winner, median / max ms", k), 0, median(waits), pair(longest), "")
	}
}

func race(ctx context.Context, s *activity.Store, d *downstream, k int) (effects int, waits []float64) {
	c := call(next("race-"))
	var (
		start    = make(chan struct{})
		finished = make([]time.Time, k)
		ran      = make([]bool, k)
		wg       sync.WaitGroup
	)
	for i := range k {
		wg.Go(func() {
			<-start
			for {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second) // the activity's start-to-close
				_, err := activity.Do(actx, s, c, func(ctx context.Context) (charge, error) {
					ran[i] = true
					return d.charge(ctx, string(c.Key.Token()), 20*time.Millisecond)
				})
				cancel()
				var busy *activity.InProgressError
				if errors.As(err, &busy) {
					time.Sleep(busy.RetryAfter)
					continue
				}
				if err != nil {
					fatalf("race: %v", err)
				}
				finished[i] = time.Now()
				return
			}
		})
	}
	close(start)
	wg.Wait()
	var winner time.Time
	for i := range k {
		if ran[i] {
			winner = finished[i]
		}
	}
	for i := range k {
		if !ran[i] {
			waits = append(waits, max(0, float64(finished[i].Sub(winner).Microseconds())/1e3))
		}
	}
	return d.requests(string(c.Key.Token())), waits
}

// endToEnd: row 6, workflows of 1 and 10 activities on the dev server, wrapped against bare.
func endToEnd(ctx context.Context, t *table, rounds int, url, cli string, d *downstream) {
	if _, err := os.Stat(cli); err != nil {
		fatalf("no temporal CLI at %s (make bin/temporal installs it): %v", cli, err)
	}
	tr := startTemporal(ctx, url, cli, d)
	defer tr.close()
	// Warm both workers' caches and connections before measuring.
	for _, q := range []string{wrappedQueue, bareQueue} {
		if err := tr.workflow(q, 10)(ctx); err != nil {
			fatalf("warm-up: %v", err)
		}
	}
	s := interleave(ctx, rounds,
		bench{name: "wrapped, 1 activity", op: tr.workflow(wrappedQueue, 1)},
		bench{name: "bare, 1 activity", op: tr.workflow(bareQueue, 1)},
		bench{name: "wrapped, 10 activities", op: tr.workflow(wrappedQueue, 10)},
		bench{name: "bare, 10 activities", op: tr.workflow(bareQueue, 10)})
	t.set("6", "end to end, 1-activity workflow: wrapped ÷ bare", 0, perRound(s, func(r []float64) float64 { return r[0] / r[1] }), ratio, "≤ 1.02")
	t.set("6", "end to end, 10-activity workflow: wrapped ÷ bare", 0, perRound(s, func(r []float64) float64 { return r[2] / r[3] }), ratio, "≤ 1.02")
	t.set("6", "bare 1-activity workflow, ms", 0, median(s[1])/1e6, millis, "")
	t.set("6", "bare 10-activity workflow, ms", 0, median(s[3])/1e6, millis, "")
}
