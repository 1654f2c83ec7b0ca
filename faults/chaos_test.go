//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/saga"
	"github.com/tempotent/tempotent/samples/payment"
)

// TestChaos mixes the faults of FAULTS.md rows 1–7, 10–13, 18, 19, 20 and 21 at random over many
// sagas and ends with FAULTS.md's table. It runs when TEMPOTENT_CHAOS_N sets the number of sagas:
//
//	make chaos N=200
//
// With TEMPOTENT_CHAOS_PARTITION set (make chaos PARTITION=1), the receipts table is converted to
// daily partitions (operator.Client.Partition) while the sagas run and the faults strike —
// Postgres is crash-restarted in the middle of the first conversion, which is retried until one
// goes through, as an operator would — and the workers purge every few seconds, so the sagas
// start on the plain table and end on the partitioned one.
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
	// Each worker serves the provider's webhooks and the shipment notifier on a port of its own,
	// kept across its restarts; the provider sends its webhooks, with duplicates, delays,
	// reordering and lost answers (rows 23, 25, 26 in passing), through a front to whichever
	// worker answers.
	var edges []string
	for range 2 {
		port, err := freeport.Get()
		require.NoError(t, err)
		edges = append(edges, fmt.Sprintf("127.0.0.1:%d", port))
	}
	front := webhookFront(t, edges)
	w := newWorld(t, worldOptions{dbURL: pg.url, temporal: server, paymentsFlags: []string{
		"-webhook-url", front + payment.PathWebhooks, "-webhook-secret", webhookSecret,
		"-faults", "webhook_duplicate=1,webhook_delay=500ms,webhook_reorder,webhook_fail=1"}})
	w.workerDB = viaProxy.String()
	// LegacyCharge's reconcile looks charges up through a front that an outage can turn off
	// (row 19).
	lookup := newLookupFront(t, w.payments.URL)
	lookup.set(lookupForwards)
	partition := os.Getenv("TEMPOTENT_CHAOS_PARTITION") != ""
	startWorker := func(i int) (*workerProc, error) {
		env := []string{"LOOKUP_URL=" + lookup.url, "TEMPOTENT_HTTP_ADDR=" + edges[i], "FAKEPAY_WEBHOOK_SECRET=" + webhookSecret, "TEMPOTENT_OUTBOX_LEASE=5s"}
		if partition {
			env = append(env, "TEMPOTENT_PURGE_EVERY=3s")
		}
		return w.spawnWorker(env...)
	}
	var workers []*workerProc
	for i := range 2 {
		p, err := startWorker(i)
		require.NoError(t, err)
		p.waitFor("worker running", 30*time.Second)
		workers = append(workers, p)
	}

	// Orders and their per-request faults (rows 10, 12, 13, 21 and declines that must not
	// charge); one in eight is charged at the gateway that does not deduplicate (row 19).
	orders := make([]payment.Order, n)
	declined := 0
	held := map[string]bool{} // row 21: the charge may land after the saga gave up on it
	for i := range orders {
		o := w.order(fmt.Sprint("o", i))
		if rng.IntN(8) == 0 {
			o.Gateway = payment.GatewayLegacy
		}
		switch rng.IntN(11) {
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
		case 6:
			// The last attempt the retry policy allows is held past its timeout and lands
			// while the saga compensates (row 21). The faults may use up the attempts before
			// the last request is sent: then nothing lands.
			o.ChargeFaults = "fail_500=19,slow=17s"
			held[o.ID] = true
		case 7:
			o.Card = "tok_async" // confirmed by webhook
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
	var pgMu sync.Mutex // one crash-restart at a time: pg_ctl stop fails on a stopped server
	crashRestart := func() {
		pgMu.Lock()
		defer pgMu.Unlock()
		pg.ctl("stop", "-m", "immediate")
		time.Sleep(300 * time.Millisecond)
		pg.ctl("start")
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			switch rng.IntN(8) {
			case 0: // rows 1–3, 13: SIGKILL a worker wherever it is, start another
				i := rng.IntN(len(workers))
				workers[i].Kill()
				restarted, err := startWorker(i) // under load it may take a while to poll
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
				crashRestart()
				count("Postgres crash-restart")
			case 4: // row 11
				i := rng.IntN(len(workers))
				if err := workers[i].Signal(syscall.SIGSTOP); err != nil {
					t.Errorf("pause a worker: %v", err)
					return
				}
				time.Sleep(12 * time.Second)
				if err := workers[i].Signal(syscall.SIGCONT); err != nil {
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
			case 6: // row 19
				mode := []int32{lookupRefuses, lookupDrops}[rng.IntN(2)]
				lookup.set(mode)
				time.Sleep(20 * time.Second)
				lookup.set(lookupForwards)
				count("lookup outage 20s")
			case 7: // row 20: a stale attempt wakes after a crash-restart (a real crash rarely
				// loses an asynchronous reservation; TestRow20ReservationLost makes it certain)
				i := rng.IntN(len(workers))
				if err := workers[i].Signal(syscall.SIGSTOP); err != nil {
					t.Errorf("pause a worker: %v", err)
					return
				}
				crashRestart()
				time.Sleep(12 * time.Second)
				if err := workers[i].Signal(syscall.SIGCONT); err != nil {
					t.Errorf("resume a worker: %v", err)
					return
				}
				count("worker SIGSTOP across a Postgres crash-restart")
			}
		}
	})

	var partitioned atomic.Bool
	if partition {
		wg.Go(func() {
			partitioned.Store(partitionOnline(t, w, stop, func() {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
				crashRestart()
				count("Postgres crash-restart during the conversion")
			}, count))
		})
	}

	// Every saga must be resolved before the test's own deadline (go test -timeout).
	waitUntil := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok {
		waitUntil = d.Add(-time.Minute)
	}
	var unresolvedWorkflows atomic.Int64
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
						unresolvedWorkflows.Add(1)
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
	duplicates := 0
	for _, c := range ledger.Charges {
		perOrder[c.Description]++
		refunded[c.Description] = refunded[c.Description] || c.Refunded
		duplicates += max(ledger.RefundsByCharge[c.ID]-1, 0)
		if ledger.RefundsByCharge[c.ID] > 1 {
			t.Logf("charge %s of %s (token %s) refunded %d times", c.ID, c.Description, c.Token, ledger.RefundsByCharge[c.ID])
		}
	}
	effects, missing, neverLanded, lost, gaveUp := 0, 0, 0, 0, 0
	orderOf := map[string]int{} // step and compensation tokens → order
	for i, o := range orders {
		effects += min(perOrder[o.ID], 1)
		duplicates += max(perOrder[o.ID]-1, 0)
		if perOrder[o.ID] > 1 {
			explain(t, w, ledger, o, results[i], "charged more than once")
		}
		switch {
		case perOrder[o.ID] > 0 || o.Card == "tok_chargeDeclined" || held[o.ID]:
		case results[i].Status == payment.StatusCompleted:
			lost++
			explain(t, w, ledger, o, results[i], "completed without its charge")
		default:
			// The faults used up the charge's attempts before any request got through (a
			// lookup outage keeps a gateway that does not deduplicate from being asked): the
			// saga gave up and compensated, and there is nothing to refund.
			gaveUp++
		}
		if results[i].Status == payment.StatusCompensated && perOrder[o.ID] > 0 && !refunded[o.ID] {
			missing++
		}
		if held[o.ID] && perOrder[o.ID] == 0 {
			neverLanded++
		}
		for _, s := range results[i].Saga.Steps {
			orderOf[s.Token], orderOf[s.CompensationToken] = i, i
		}
	}
	// Unresolved receipts (an effect may have happened and no attempt recorded what): a saga
	// that gave up on a step leaves one, for an operator (row 21 does, by design). One of a saga
	// that completed would be a receipt that forgot an outcome its saga saw.
	var stuck, unresolved, unexplained int
	rows, err := w.db().Query(context.Background(), `SELECT token, state = 'pending' AND NOT `+unresolvedCondition+`, `+unresolvedCondition+`
		FROM `+w.schema+`.receipts WHERE state = 'pending' OR `+unresolvedCondition)
	require.NoError(t, err)
	for rows.Next() {
		var token string
		var isStuck, isUnresolved bool
		require.NoError(t, rows.Scan(&token, &isStuck, &isUnresolved))
		switch i, ok := orderOf[token]; {
		case isStuck:
			stuck++
		case isUnresolved:
			unresolved++
			if !ok || results[i].Status != payment.StatusCompensated {
				unexplained++
				t.Logf("unresolved receipt %s of a saga that did not compensate", token)
			}
		}
	}
	require.NoError(t, rows.Err())
	// One receipt per key, whichever layout: a second one is a second reservation of an intent,
	// even when the downstream's deduplication kept it from charging twice.
	var twice int
	require.NoError(t, w.db().QueryRow(context.Background(), `SELECT count(*) FROM (SELECT FROM `+w.schema+`.receipts
		GROUP BY namespace, tenant, operation, id HAVING count(*) > 1) d`).Scan(&twice))
	eventsTwice, eventsLost := w.messageCounts(w.payments.URL, orders, results)
	fmt.Println()
	fmt.Println("| intents | effects | duplicates | missing compensations | stuck receipts | unresolved receipts | unresolved workflows | events processed twice | events lost |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	fmt.Printf("| %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", n, effects, duplicates, missing, stuck, unresolved, unresolvedWorkflows.Load(), eventsTwice, eventsLost)
	if partition {
		fmt.Printf("receipts partitioned while the sagas ran: %v\n", partitioned.Load())
	}
	fmt.Printf("faults injected: %v; declined cards (no effect intended): %d; charges held past the last attempt: %d, of which never sent: %d; sagas that gave up before any charge got through: %d\n",
		events, declined, len(held), neverLanded, gaveUp)

	if partition {
		require.True(t, partitioned.Load(), "the receipts table was not partitioned before the sagas ended")
	}
	require.Zero(t, duplicates, "duplicate charges or refunds")
	require.Zero(t, twice, "keys with more than one receipt")
	require.Zero(t, missing, "missing compensations")
	require.Zero(t, stuck, "stuck receipts")
	require.Zero(t, unexplained, "unresolved receipts of sagas that did not compensate")
	require.Zero(t, unresolvedWorkflows.Load(), "unresolved workflows")
	require.Zero(t, lost, "completed sagas whose charge is not in the ledger")
	require.Zero(t, eventsTwice, "events processed twice")
	require.Zero(t, eventsLost, "events lost")
	require.Equal(t, n-declined-neverLanded-gaveUp, effects, "effects differ from the intents that should have taken effect")
}

// partitionOnline converts w's receipts table to daily partitions while the chaos runs: a few
// seconds in, with crash crash-restarting Postgres in the middle of that first conversion, and
// again after each failure (Postgres restarting, a backend terminated, a lock timeout behind a
// paused worker) until a conversion goes through or stop closes. It reports whether the table
// ended partitioned.
func partitionOnline(t *testing.T, w *world, stop <-chan struct{}, crash func(), count func(string)) bool {
	op, err := operator.NewClient(w.db(), operator.Config{Schema: w.schema})
	if err != nil {
		t.Errorf("partition: %v", err)
		return false
	}
	var crashing sync.WaitGroup
	defer crashing.Wait()
	for attempt, wait := 1, 5*time.Second; ; attempt, wait = attempt+1, 2*time.Second {
		select {
		case <-stop:
			return false
		case <-time.After(wait):
		}
		if attempt == 1 {
			crashing.Go(crash)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := op.Partition(ctx)
		cancel()
		if err == nil {
			count("receipts partitioned online")
			return true
		}
		count("partition attempt failed")
		t.Logf("partition the receipts (will try again): %v", err)
	}
}

// unresolvedCondition is the definition of an unresolved receipt that operator.Client.Unresolved
// counts: outcome unknown, or pending after an attempt that may have had its effect and whose
// lease has ended.
// (coalesce keeps NULL columns from making the condition NULL.)
const unresolvedCondition = `(coalesce(error_type = 'tempotent.OutcomeUnknown', false)
	OR (state = 'pending' AND effect_possible AND coalesce(lease_expires_at <= now(), false)))`

// explain logs what a failing chaos run needs to be understood: the order, its charges, the
// saga's steps, every receipt of its keys and the workers' log lines about it.
func explain(t *testing.T, w *world, ledger fakepay.Ledger, o payment.Order, r payment.Result, what string) {
	t.Helper()
	t.Logf("order %s %s (gateway %q, faults %q, status %s)", o.ID, what, o.Gateway, o.ChargeFaults, r.Status)
	for _, c := range ledger.Charges {
		if c.Description == o.ID {
			t.Logf("  charge %s key %q token %q refunded=%v requests under its key: %d", c.ID, c.Key, c.Token, c.Refunded, ledger.RequestsByKey[c.Key])
		}
	}
	for _, s := range r.Saga.Steps {
		t.Logf("  step %+v", s)
	}
	w.mu.Lock()
	workers := slices.Clone(w.workers)
	w.mu.Unlock()
	for i, p := range workers {
		p.mu.Lock()
		for _, line := range p.log {
			if strings.Contains(line, o.ID) || slices.ContainsFunc(r.Saga.Steps, func(s saga.StepState) bool { return s.Token != "" && strings.Contains(line, s.Token) }) {
				t.Logf("  worker %d: %s", i, line)
			}
		}
		p.mu.Unlock()
	}
	rows, err := w.db().Query(context.Background(), `SELECT operation, id, token, state, fence, attempts, effect_possible,
		coalesce(error_type, ''), created_at, updated_at FROM `+w.schema+`.receipts WHERE id LIKE '%' || $1 || '%' ORDER BY created_at`, o.ID)
	if err != nil {
		t.Logf("  receipts: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var op, id, token, state, errType string
		var fence, attempts int64
		var effectPossible bool
		var created, updated time.Time
		if err := rows.Scan(&op, &id, &token, &state, &fence, &attempts, &effectPossible, &errType, &created, &updated); err != nil {
			t.Logf("  receipts: %v", err)
			return
		}
		t.Logf("  receipt %s %s token %s: %s fence %d attempts %d effect_possible %v %s created %s updated %s",
			op, id, token, state, fence, attempts, effectPossible, errType, created.Format(time.StampMilli), updated.Format(time.StampMilli))
	}
}
