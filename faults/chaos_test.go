//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/samples/payment"
)

// TestChaos mixes the faults of FAULTS.md rows 1–7, 10–13 and 18 at random over many sagas and
// ends with FAULTS.md's table. It runs when TEMPOTENT_CHAOS_N sets the number of sagas:
//
//	make chaos N=200
func TestChaos(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TEMPOTENT_CHAOS_N"))
	if n <= 0 {
		t.Skip("set TEMPOTENT_CHAOS_N (make chaos N=200)")
	}
	seed, _ := strconv.ParseUint(os.Getenv("TEMPOTENT_CHAOS_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 42))

	// Postgres of its own (row 6 restarts it) behind a proxy that can lose COMMIT replies (row 5);
	// a Temporal server with a database file (row 18 kills it); two workers (row 7).
	pg := newCluster(t)
	target, err := url.Parse(pg.url)
	require.NoError(t, err)
	proxy := startProxy(t, target.Host)
	viaProxy := *target
	viaProxy.Host = proxy.addr
	viaProxy.RawQuery = "sslmode=disable"
	port, err := freeport.Get()
	require.NoError(t, err)
	db := filepath.Join(t.TempDir(), "temporal.db")
	server, err := startTemporal(db, port)
	require.NoError(t, err)
	t.Cleanup(func() { server.kill() })
	w := newWorld(t, worldOptions{dbURL: pg.url, temporal: server})
	w.workerDB = viaProxy.String()
	workers := []*workerProc{w.startWorker(), w.startWorker()}

	// Orders and their per-request faults (rows 10, 12, 13 and declines that must not charge).
	orders := make([]payment.Order, n)
	declined := 0
	for i := range orders {
		o := w.order(fmt.Sprint("o", i))
		switch rng.IntN(10) {
		case 0:
			o.Card = "tok_chargeDeclined"
			declined++
		case 1:
			o.ChargeFaults = "fail_500=2"
		case 2:
			o.ChargeFaults = "rate_limit=1,retry_after=1s"
		case 3:
			o.ChargeFaults = "drop=1"
		case 4:
			o.ChargeFaults = "slow=11s" // outlives the 10 s start-to-close timeout: row 10
		case 5:
			o.Address = "nowhere" // compensate: refund and release
		}
		orders[i] = o
	}
	for _, o := range orders {
		w.saga(o)
	}
	// Row 7's concurrent duplicates are the two workers racing on the retries the faults cause.

	// Process faults, at random, while the sagas run.
	var (
		mu     sync.Mutex
		events = map[string]int{}
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	count := func(what string) { mu.Lock(); events[what]++; mu.Unlock() }
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			switch rng.IntN(6) {
			case 0: // rows 1–3, 13: SIGKILL a worker wherever it is, start another
				i := rng.IntN(len(workers))
				workers[i].kill()
				restarted, err := w.spawnWorker() // under load it may take a while to poll
				if err != nil {
					t.Errorf("restart a worker: %v", err)
					return
				}
				workers[i] = restarted
				count("worker SIGKILL")
			case 1: // row 4
				pool := w.db()
				_, _ = pool.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'tempotent-worker-%'")
				count("backends terminated")
			case 2: // row 5
				proxy.armed.Store(true)
				count("COMMIT reply armed to drop")
			case 3: // row 6
				pg.ctl("stop", "-m", "immediate")
				time.Sleep(300 * time.Millisecond)
				pg.ctl("start")
				count("Postgres crash-restart")
			case 4: // row 11
				i := rng.IntN(len(workers))
				if err := workers[i].signal(syscall.SIGSTOP); err != nil {
					t.Errorf("pause a worker: %v", err)
					return
				}
				time.Sleep(12 * time.Second)
				if err := workers[i].signal(syscall.SIGCONT); err != nil {
					t.Errorf("resume a worker: %v", err)
					return
				}
				count("worker SIGSTOP 12s")
			case 5: // row 18
				if events["Temporal SIGKILL"] < 1 {
					server.kill()
					restarted, err := startTemporal(db, port)
					if err != nil {
						t.Errorf("restart Temporal: %v", err)
						return
					}
					*server = *restarted
					count("Temporal SIGKILL")
				}
			}
		}
	})

	// Every saga must be resolved before the test's own deadline (go test -timeout).
	waitUntil := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok {
		waitUntil = d.Add(-time.Minute)
	}
	var unresolved atomic.Int64
	results := make([]payment.Result, n)
	var rw sync.WaitGroup
	for i, o := range orders {
		rw.Go(func() {
			ctx, cancel := context.WithDeadline(context.Background(), waitUntil)
			defer cancel()
			for {
				err := server.client.GetWorkflow(ctx, o.ID, "").Get(ctx, &results[i])
				if err == nil || ctx.Err() != nil {
					if err != nil {
						unresolved.Add(1)
					}
					return
				}
				time.Sleep(time.Second) // the server may be restarting
			}
		})
	}
	rw.Wait()
	close(stop)
	wg.Wait()
	proxy.armed.Store(false)

	// FAULTS.md's table, from the ledgers and the database.
	ledger := w.ledger()
	perOrder := map[string]int{}
	refunded := map[string]bool{}
	for _, c := range ledger.Charges {
		perOrder[c.Description]++
		refunded[c.Description] = refunded[c.Description] || c.Refunded
	}
	effects, duplicates, missing := 0, 0, 0
	for i, o := range orders {
		effects += min(perOrder[o.ID], 1)
		duplicates += max(perOrder[o.ID]-1, 0)
		if results[i].Status == payment.StatusCompensated && perOrder[o.ID] > 0 && !refunded[o.ID] {
			missing++
		}
	}
	stuck := w.pending()
	fmt.Println()
	fmt.Println("| intents | effects | duplicates | missing compensations | stuck receipts | unresolved workflows |")
	fmt.Println("|---|---|---|---|---|---|")
	fmt.Printf("| %d | %d | %d | %d | %d | %d |\n", n, effects, duplicates, missing, stuck, unresolved.Load())
	fmt.Printf("faults injected: %v; declined cards (no effect intended): %d\n", events, declined)

	require.Zero(t, duplicates, "duplicate charges")
	require.Zero(t, missing, "missing compensations")
	require.Zero(t, stuck, "stuck receipts")
	require.Zero(t, unresolved.Load(), "unresolved workflows")
	require.Equal(t, n-declined, effects, "effects differ from the intents that should have taken effect")
}
