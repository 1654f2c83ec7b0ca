// Package demo runs the payment sample end to end: the Temporal dev server (or a given one),
// Postgres, two fakepay processes (the payment provider and the carrier), the worker as a
// process of its own, and N orders with a mix of failures, including SIGKILLed workers. It ends
// with a summary read from the providers' ledgers and the database, never from logs.
package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/samples/payment"
	"github.com/tempotent/tempotent/worker"
)

// Mix is the share of orders that meet each failure, and how often the worker is killed.
type Mix struct {
	Declines        float64 // the card is declined: the saga compensates
	ProviderErrors  float64 // the provider answers 500 twice before charging
	LostResponses   float64 // the provider charges, then the connection drops before it answers
	CarrierRefusals float64 // the carrier refuses the address: refund and release
	AsyncCharges    float64 // the provider answers "processing" and confirms by webhook
	AsyncDeclines   float64 // the provider answers "processing" and fails it by webhook: refund and release
	WorkerRestarts  int     // times the worker process is SIGKILLed and started again
	// WebhookFaults are fakepay's webhook faults (fakepay.ParseFaults) for the whole run.
	WebhookFaults string
}

// MixDefault is what make demo runs: every webhook is sent twice, late, out of order, and the
// first answer to each is lost, so the provider sends it once more.
var MixDefault = Mix{Declines: 0.1, ProviderErrors: 0.15, LostResponses: 0.1, CarrierRefusals: 0.1, AsyncCharges: 0.15, AsyncDeclines: 0.05,
	WorkerRestarts: 2, WebhookFaults: "webhook_duplicate=1,webhook_delay=300ms,webhook_reorder,webhook_fail=1"}

// Options configures a run. Zero values take defaults.
type Options struct {
	Orders int // default 50
	// Payees is how many sellers the run's payout batch pays in one activity (default 300),
	// while the orders run and the worker is killed.
	Payees int
	Mix    Mix
	Seed   uint64
	// Setup is the configuration of Temporal and Postgres; zero starts them locally.
	Setup worker.Config
	// Dir holds the run's binaries, fakepay state and logs; default .tmp/demo.
	Dir string
	// Out receives the progress bar and the summary; default os.Stdout.
	Out io.Writer
	// Timeout bounds the whole run; default 10 minutes.
	Timeout time.Duration
}

// Summary is what the run did, counted at the providers and in the database.
type Summary struct {
	Orders, Completed, Compensated, Unresolved int
	Charges, Refunds                           int
	Shipments, Cancellations                   int
	DuplicateCharges                           int // charges beyond the first for one order
	MissedRefunds                              int // charges of compensated orders left unrefunded
	StuckReceipts                              int // receipts of this run still pending
	WorkerRestarts                             int
	Messages                                   Messages
	CompensatedBecause                         map[string]int // error type of the failed step
	P50, P95                                   time.Duration
	TemporalUI                                 string
	// Payees is how many sellers the payout batch paid; PayeesPaidTwice counts sellers with
	// more than one transfer, PayeesUnpaid sellers with none. Both must be 0.
	Payees, PayeesPaidTwice, PayeesUnpaid int
	// PayoutAttempts is the attempt of the payout's activity that finished it.
	PayoutAttempts int
	// UnresolvedReceipts counts this run's receipts whose outcome waits for a person.
	UnresolvedReceipts int
	// Operate is the tempotent command line for this run's database and schema, which the
	// summary names for looking at the receipts.
	Operate string
}

// Messages counts the run's webhooks and outbox messages, at the provider and in the database.
type Messages struct {
	WebhookEvents     int // events the provider created for this run's charges
	WebhookDeliveries int // deliveries the intake answered 2xx (duplicates included)
	WebhooksStored    int // deliveries stored: one per event
	EventsToWorkflows int // events that reached a running workflow (the others came after it finished)
	AsyncSettled      int // charges answered "processing" whose workflow got their confirmation once
	OutboxMessages    int // reservation messages put
	OutboxDelivered   int
	ConsumerDups      int // deliveries the consumers (notifier, charge ledger) acknowledged without running
	NotifierDups      int // of those, the shipment notifier's: reservation messages delivered again
	ProcessedOnce     int // reservation messages the notifier processed exactly once
	ChargesKept       int // this run's charges in the charge ledger
	StaleSkipped      int // provider events the ledger skipped as older than the status it held (inbox.Inbox.Newer)
	// Invariants: all must be 0.
	ChargeStatusWrong int // a charge whose status in the ledger is not the provider's
	ProcessedTwice    int // an event a workflow received twice, or a message the notifier processed twice
	Lost              int // an async charge whose workflow never got its confirmation, or a message never delivered or processed
}

// OK reports whether the invariants hold.
func (s Summary) OK() bool {
	return s.DuplicateCharges == 0 && s.MissedRefunds == 0 && s.StuckReceipts == 0 && s.Unresolved == 0 &&
		s.PayeesPaidTwice == 0 && s.PayeesUnpaid == 0 &&
		s.Messages.ProcessedTwice == 0 && s.Messages.Lost == 0 && s.Messages.ChargeStatusWrong == 0
}

// Run runs the demo and returns its summary.
func Run(ctx context.Context, o Options) (Summary, error) {
	o.Orders = cmp.Or(o.Orders, 50)
	o.Payees = cmp.Or(o.Payees, 300)
	o.Dir = cmp.Or(o.Dir, filepath.Join(".tmp", "demo"))
	o.Timeout = cmp.Or(o.Timeout, 10*time.Minute)
	if o.Out == nil {
		o.Out = os.Stdout
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	runID := time.Now().UTC().Format("20060102-150405")
	dir, err := filepath.Abs(filepath.Join(o.Dir, runID))
	if err != nil {
		return Summary{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Summary{}, err
	}

	cfg := o.Setup
	cfg.Migrate = true
	cfg.TaskQueue = "demo-" + runID
	cfg.LogLevel = cmp.Or(cfg.LogLevel, "warn")
	env, err := worker.Start(ctx, cfg)
	if err != nil {
		return Summary{}, err
	}
	defer env.Close()
	if err := payment.Migrate(ctx, env.Pool); err != nil {
		return Summary{}, err
	}
	started := time.Now()
	if env.TemporalUI != "" {
		fmt.Fprintf(o.Out, "Temporal Web UI: %s\n", env.TemporalUI)
	}

	fmt.Fprintf(o.Out, "building the worker and fakepay into %s\n", dir)
	workerBin, fakepayBin := filepath.Join(dir, "worker"), filepath.Join(dir, "fakepay")
	for bin, pkg := range map[string]string{workerBin: proc.SampleWorker, fakepayBin: proc.Fakepay} {
		if err := proc.Build(ctx, bin, pkg, failpoint.Tag); err != nil { // the worker's failpoint: see redeliverPoint
			return Summary{}, err
		}
	}
	// The worker serves the provider's webhooks on a port that stays the same across its restarts.
	edgePort, err := freeport.Get()
	if err != nil {
		return Summary{}, err
	}
	edgeAddr := fmt.Sprintf("127.0.0.1:%d", edgePort)
	var servers [2]*proc.Server
	for i, name := range []string{"payments", "carrier"} {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return Summary{}, err
		}
		defer logf.Close()
		var webhooks []string
		if name == "payments" {
			webhooks = []string{"-webhook-url", "http://" + edgeAddr + payment.PathWebhooks, "-webhook-secret", webhookSecret, "-faults", o.Mix.WebhookFaults}
		}
		if servers[i], err = proc.StartFakepay(fakepayBin, filepath.Join(dir, name+".json"), logf, 30*time.Second, webhooks...); err != nil {
			return Summary{}, fmt.Errorf("%s (see %s.log): %w", name, filepath.Join(dir, name), err)
		}
		defer servers[i].Stop()
	}
	payments, carrier := servers[0], servers[1]

	w := &workerProc{bin: workerBin, log: filepath.Join(dir, "worker.log"), env: []string{
		"TEMPORAL_ADDRESS=" + env.Config.TemporalAddress,
		"TEMPORAL_NAMESPACE=" + env.Config.Namespace,
		"DATABASE_URL=" + env.Pool.Config().ConnString(),
		"TEMPOTENT_SCHEMA=" + env.Config.Receipts.Schema,
		"TEMPOTENT_TASK_QUEUE=" + cfg.TaskQueue,
		"TEMPOTENT_LOG_LEVEL=warn",
		"FAKEPAY_URL=" + payments.URL,
		"CARRIER_URL=" + carrier.URL,
		"TEMPOTENT_HTTP_ADDR=" + edgeAddr,
		"FAKEPAY_WEBHOOK_SECRET=" + webhookSecret,
		"TEMPOTENT_OUTBOX_LEASE=" + outboxLease,
	}}
	if o.Mix.WorkerRestarts > 0 {
		w.arm = newReachedWatch() // the first worker is killed between a publish and its mark
	}
	if err := w.start(); err != nil {
		return Summary{}, err
	}
	defer w.stop()

	orders := makeOrders(runID, o.Orders, o.Mix, o.Seed)
	payout := makePayout(runID, o.Payees)
	payoutRun, err := env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: payout.ID, TaskQueue: cfg.TaskQueue}, "PayoutWorkflow", payout)
	if err != nil {
		return Summary{}, fmt.Errorf("start the payout: %w", err)
	}
	results, latencies, restarts := runOrders(ctx, env.Client, cfg.TaskQueue, orders, o.Mix.WorkerRestarts, w, o.Out)
	var payoutResult payment.PayoutResult
	if err := payoutRun.Get(ctx, &payoutResult); err != nil {
		fmt.Fprintf(o.Out, "the payout did not finish: %v\n", err)
	}

	sum := Summary{Orders: len(orders), WorkerRestarts: restarts, TemporalUI: env.TemporalUI, CompensatedBecause: map[string]int{}}
	compensated := map[string]bool{}
	for id, r := range results {
		switch r.Status {
		case payment.StatusCompleted:
			sum.Completed++
		case payment.StatusCompensated:
			sum.Compensated++
			compensated[id] = true
			sum.CompensatedBecause[errorType(r.Reason)]++
		default:
			sum.Unresolved++
		}
	}
	if err := sum.countLedgers(ctx, payments.URL, carrier.URL, compensated, ordersByID(orders)); err != nil {
		return sum, err
	}
	sum.PayoutAttempts = int(payoutResult.Attempt)
	if err := sum.countPayout(ctx, payments.URL, payout); err != nil {
		return sum, err
	}
	if err := sum.countMessages(ctx, env, payments.URL, orders, results, started); err != nil {
		return sum, err
	}
	counts, err := env.Operator.CountSince(ctx, started)
	if err != nil {
		return sum, fmt.Errorf("count stuck receipts: %w", err)
	}
	sum.StuckReceipts = int(counts.Pending)
	sum.UnresolvedReceipts = int(counts.Unresolved)
	sum.Operate = operateCommand(env.Pool.Config().ConnString(), env.Config.Receipts.Schema)
	sum.P50, sum.P95 = percentile(latencies, 0.50), percentile(latencies, 0.95)
	sum.print(o.Out)
	return sum, nil
}

// errorType is the error type at the head of a Result.Reason.
func errorType(reason string) string {
	t, _, _ := strings.Cut(reason, ":")
	return t
}

func ordersByID(orders []payment.Order) map[string]bool {
	m := map[string]bool{}
	for _, o := range orders {
		m[o.ID] = true
	}
	return m
}

func (s *Summary) countLedgers(ctx context.Context, paymentsURL, carrierURL string, compensated, ours map[string]bool) error {
	pl, err := fakepay.NewClient(paymentsURL).Ledger(ctx)
	if err != nil {
		return fmt.Errorf("read the payment provider's ledger: %w", err)
	}
	perOrder := map[string]int{}
	for _, c := range pl.Charges {
		if !ours[c.Description] || c.Status == "failed" {
			continue // a charge the provider failed after processing moved no money
		}
		s.Charges++
		perOrder[c.Description]++
		if compensated[c.Description] && !c.Refunded {
			s.MissedRefunds++
		}
	}
	for _, n := range perOrder {
		s.DuplicateCharges += max(n-1, 0)
	}
	s.Refunds = len(pl.Refunds)
	cl, err := fakepay.NewClient(carrierURL).Ledger(ctx)
	if err != nil {
		return fmt.Errorf("read the carrier's ledger: %w", err)
	}
	s.Shipments, s.Cancellations = len(cl.Charges), len(cl.Refunds)
	return nil
}

// makePayout is the run's payout batch: n sellers, each paid a different amount.
func makePayout(runID string, n int) payment.Payout {
	// Each transfer held 300 ms, eight at once: the batch runs through the first worker kill.
	p := payment.Payout{ID: "payout-" + runID, Sellers: make([]payment.Seller, n), Faults: "slow=300ms"}
	for i := range p.Sellers {
		p.Sellers[i] = payment.Seller{ID: fmt.Sprintf("seller-%04d", i), Account: "tok_visa", Amount: int64(1000 + i), Currency: "eur",
			Note: "balance of " + runID}
	}
	return p
}

// countPayout counts the payout's transfers at the provider per seller.
func (s *Summary) countPayout(ctx context.Context, paymentsURL string, p payment.Payout) error {
	ledger, err := fakepay.NewClient(paymentsURL).Ledger(ctx)
	if err != nil {
		return fmt.Errorf("read the payment provider's ledger: %w", err)
	}
	perSeller := map[string]int{}
	for _, c := range ledger.Charges {
		if c.Status != "failed" {
			perSeller[c.Description]++
		}
	}
	s.Payees = len(p.Sellers)
	for _, seller := range p.Sellers {
		switch n := perSeller[payment.PayoutDescription(p.ID, seller.ID)]; {
		case n == 0:
			s.PayeesUnpaid++
		case n > 1:
			s.PayeesPaidTwice++
		}
	}
	return nil
}

func (s Summary) print(out io.Writer) {
	mark := func(n int) string {
		if n == 0 {
			return fmt.Sprintf("%d", n)
		}
		return fmt.Sprintf("%d  <-- must be 0", n)
	}
	rows := [][2]string{
		{"orders", fmt.Sprint(s.Orders)},
		{"completed", fmt.Sprint(s.Completed)},
		{"compensated", fmt.Sprint(s.Compensated)},
		{"unresolved", mark(s.Unresolved)},
		{"charges", fmt.Sprint(s.Charges)},
		{"refunds", fmt.Sprint(s.Refunds)},
		{"shipments / cancelled", fmt.Sprintf("%d / %d", s.Shipments, s.Cancellations)},
		{"worker restarts (SIGKILL)", fmt.Sprint(s.WorkerRestarts)},
		{"DUPLICATE CHARGES", mark(s.DuplicateCharges)},
		{"MISSED REFUNDS", mark(s.MissedRefunds)},
		{"payout: payees / attempts", fmt.Sprintf("%d / %d", s.Payees, s.PayoutAttempts)},
		{"PAYEES PAID TWICE", mark(s.PayeesPaidTwice)},
		{"PAYEES UNPAID", mark(s.PayeesUnpaid)},
		{"STUCK RECEIPTS", mark(s.StuckReceipts)},
		{"webhook events / deliveries", fmt.Sprintf("%d / %d", s.Messages.WebhookEvents, s.Messages.WebhookDeliveries)},
		{"webhooks stored / to workflows", fmt.Sprintf("%d / %d", s.Messages.WebhooksStored, s.Messages.EventsToWorkflows)},
		{"async charges settled once", fmt.Sprint(s.Messages.AsyncSettled)},
		{"outbox messages / delivered", fmt.Sprintf("%d / %d", s.Messages.OutboxMessages, s.Messages.OutboxDelivered)},
		{"consumer duplicates absorbed", fmt.Sprintf("%d (notifier %d)", s.Messages.ConsumerDups, s.Messages.NotifierDups)},
		{"messages processed once", fmt.Sprint(s.Messages.ProcessedOnce)},
		{"EVENTS PROCESSED TWICE", mark(s.Messages.ProcessedTwice)},
		{"EVENTS LOST", mark(s.Messages.Lost)},
		{"ledger charges / stale events", fmt.Sprintf("%d / %d", s.Messages.ChargesKept, s.Messages.StaleSkipped)},
		{"CHARGE STATUS WRONG", mark(s.Messages.ChargeStatusWrong)},
		{"saga latency p50 / p95", fmt.Sprintf("%v / %v", s.P50.Round(time.Millisecond), s.P95.Round(time.Millisecond))},
	}
	fmt.Fprintln(out)
	line := "+" + strings.Repeat("-", 32) + "+" + strings.Repeat("-", 22) + "+"
	fmt.Fprintln(out, line)
	for _, r := range rows {
		fmt.Fprintf(out, "| %-30s | %-20s |\n", r[0], r[1])
	}
	fmt.Fprintln(out, line)
	for _, why := range slices.Sorted(maps.Keys(s.CompensatedBecause)) {
		fmt.Fprintf(out, "  compensated because of %s: %d\n", why, s.CompensatedBecause[why])
	}
	if s.TemporalUI != "" {
		fmt.Fprintf(out, "Temporal Web UI (while the demo runs): %s\n", s.TemporalUI)
	}
	if s.Operate == "" {
		return
	}
	if s.UnresolvedReceipts > 0 || s.StuckReceipts > 0 || s.Unresolved > 0 {
		fmt.Fprintf(out, "Receipts waiting for a person: %d. List them, then settle each with receipts resolve:\n  %s receipts list --state unresolved\n",
			s.UnresolvedReceipts, s.Operate)
		return
	}
	fmt.Fprintf(out, "The receipts behind these numbers: %s stats (or receipts list, receipts show TOKEN)\n", s.Operate)
}

// operateCommand is the tempotent command line for the demo's database and schema.
func operateCommand(databaseURL, schema string) string {
	cmd := "go run ./cmd/tempotent"
	if schema != new(activity.Config).WithDefaults().Schema {
		cmd = "TEMPOTENT_SCHEMA=" + schema + " " + cmd
	}
	if databaseURL != "" {
		cmd = "DATABASE_URL='" + databaseURL + "' " + cmd
	}
	return cmd
}

// makeOrders makes n orders with the mix's failures in exact proportions (rounded), in an
// order shuffled by seed.
func makeOrders(runID string, n int, mix Mix, seed uint64) []payment.Order {
	rng := rand.New(rand.NewPCG(seed, 0x7e3907e47))
	kinds := make([]string, n)
	next := 0
	for _, k := range []struct {
		name  string
		share float64
	}{{"decline", mix.Declines}, {"5xx", mix.ProviderErrors}, {"lost", mix.LostResponses}, {"refusal", mix.CarrierRefusals},
		{"async", mix.AsyncCharges}, {"async-decline", mix.AsyncDeclines}} {
		for c := int(k.share*float64(n) + 0.5); c > 0 && next < n; c-- {
			kinds[next] = k.name
			next++
		}
	}
	rng.Shuffle(n, func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	orders := make([]payment.Order, n)
	for i := range orders {
		o := payment.Order{ID: fmt.Sprintf("order-%s-%03d", runID, i), Amount: 500 + int64(rng.IntN(20000)), Currency: "eur",
			Card: "tok_visa", SKU: "widget", Units: 1 + rng.IntN(3), Address: "1 Main St"}
		switch kinds[i] {
		case "decline":
			o.Card = "tok_chargeDeclined"
		case "5xx":
			o.ChargeFaults = "fail_500=2"
		case "lost":
			o.ChargeFaults = "drop=1"
		case "refusal":
			o.Address = "nowhere"
		case "async":
			o.Card = "tok_async"
		case "async-decline":
			o.Card = "tok_asyncDeclined"
		}
		orders[i] = o
	}
	return orders
}

// runOrders starts every order's saga, kills and restarts the worker `restarts` times spread
// over the run, shows progress, and returns each order's result and latency.
func runOrders(ctx context.Context, c client.Client, queue string, orders []payment.Order, restarts int, w *workerProc, out io.Writer) (map[string]payment.Result, []time.Duration, int) {
	var (
		mu        sync.Mutex
		results   = map[string]payment.Result{}
		latencies []time.Duration
		done      atomic.Int32
		wg        sync.WaitGroup
	)
	for _, o := range orders {
		wg.Go(func() {
			start := time.Now()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: o.ID, TaskQueue: queue}, "PaymentSaga", o)
			var r payment.Result
			if err == nil {
				err = run.Get(ctx, &r)
			}
			if err != nil {
				r = payment.Result{OrderID: o.ID, Status: "unresolved: " + err.Error()}
			}
			mu.Lock()
			results[o.ID] = r
			latencies = append(latencies, time.Since(start))
			mu.Unlock()
			done.Add(1)
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	restarted, shown := 0, ""
	show := func(n int) { // redraw only on change: the bar also goes to logs
		if line := progressLine(n, len(orders), restarted, restarts); line != shown {
			fmt.Fprint(out, "\r"+line)
			shown = line
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		n := int(done.Load())
		// Kill the worker when the run crosses each of `restarts` evenly spaced marks; the
		// first, armed worker when it has published a message and not marked it.
		due := n >= (restarted+1)*len(orders)/(restarts+2)
		if restarted == 0 && w.armed != nil {
			due = w.reached()
		}
		if restarted < restarts && due {
			w.kill()
			restarted++
			time.Sleep(500 * time.Millisecond)
			if err := w.start(); err != nil {
				fmt.Fprintln(out, "\nrestart the worker:", err)
			}
		}
		show(n)
		select {
		case <-finished:
			show(len(orders))
			fmt.Fprintln(out)
			return results, latencies, restarted
		case <-ctx.Done():
			fmt.Fprintln(out, "\ntimed out waiting for the sagas")
			wg.Wait()
			return results, latencies, restarted
		case <-tick.C:
		}
	}
}

func progressLine(n, total, restarted, restarts int) string {
	const width = 40
	filled := width * n / max(total, 1)
	return fmt.Sprintf("[%s%s] %d/%d sagas done, worker restarts %d/%d ", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, total, restarted, restarts)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// workerProc is the worker process, which the demo kills and starts again.
type workerProc struct {
	bin, log string
	env      []string
	// arm, if set, arms the next start's failpoint (redeliverPoint), and watches for it; armed
	// is that start's watch.
	arm, armed *reachedWatch

	mu sync.Mutex
	p  *proc.Process
}

func (w *workerProc) start() error {
	logf, err := os.OpenFile(w.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(w.bin)
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if w.arm != nil {
		cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+redeliverPoint+"=pause")
		cmd.Stderr = io.MultiWriter(logf, w.arm)
		w.armed, w.arm = w.arm, nil
	}
	p, err := proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start the worker: %w", err)
	}
	w.mu.Lock()
	w.p = p
	w.mu.Unlock()
	return nil
}

// reached reports whether the armed worker reached its failpoint.
func (w *workerProc) reached() bool {
	select {
	case <-w.armed.reached:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL: no chance to finish anything, as a crash.
func (w *workerProc) kill() { w.end((*proc.Process).Kill) }

// stop sends SIGTERM and waits for the graceful shutdown.
func (w *workerProc) stop() { w.end((*proc.Process).Stop) }

func (w *workerProc) end(how func(*proc.Process)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.p != nil {
		how(w.p)
		w.p = nil
	}
}
