//go:build unix

package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/samples/payment"
)

// The binaries and the shared dev server of the test binary.
var (
	workerBin, fakepayBin, temporalBin string
	shared                             *temporalServer
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "tempotent-faults-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	temporalBin, err = filepath.Abs("../bin/temporal")
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(temporalBin); err != nil {
		return 0, fmt.Errorf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", temporalBin)
	}
	workerBin, fakepayBin = filepath.Join(dir, "worker"), filepath.Join(dir, "fakepay")
	for out, pkg := range map[string]string{workerBin: proc.SampleWorker, fakepayBin: proc.Fakepay} {
		// The tag compiles in the failpoints that the tests arm through failpoint.EnvVar;
		// without it the worker would run straight past them.
		if err := proc.Build(context.Background(), out, pkg, failpoint.Tag); err != nil {
			return 0, err
		}
	}
	pool, err := pgxpool.New(context.Background(), pgtest.URL())
	if err != nil {
		return 0, err
	}
	err = payment.Migrate(context.Background(), pool)
	pool.Close()
	if err != nil {
		return 0, err
	}
	shared, err = startTemporal(filepath.Join(dir, "temporal.db"), 0)
	if err != nil {
		return 0, err
	}
	defer shared.kill()
	return m.Run(), nil
}

// temporalServer is a `temporal server start-dev` process with its database in a file, so it
// can be SIGKILLed and started again on the same port with its workflows intact.
type temporalServer struct {
	cmd    *exec.Cmd
	addr   string
	dbFile string
	client client.Client
}

func startTemporal(dbFile string, port int) (*temporalServer, error) {
	if port == 0 {
		var err error
		if port, err = freeport.Get(); err != nil {
			return nil, err
		}
	}
	s := &temporalServer{addr: fmt.Sprintf("127.0.0.1:%d", port), dbFile: dbFile}
	s.cmd = exec.Command(temporalBin, "server", "start-dev", "--ip", "127.0.0.1", "--port", fmt.Sprint(port),
		"--headless", "--db-filename", dbFile, "--log-level", "error",
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false")
	// Leashed (proc.Start): if this test binary dies, so does the server.
	if _, err := proc.Start(s.cmd); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := client.Dial(client.Options{
			HostPort:           s.addr,
			Logger:             tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
			ContextPropagators: []workflow.ContextPropagator{keys.TenantPropagator()},
		})
		if err == nil {
			if _, err = c.CheckHealth(context.Background(), nil); err == nil {
				s.client = c
				return s, nil
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("temporal dev server on %s did not start: %w", s.addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *temporalServer) kill() {
	if s.client != nil {
		s.client.Close()
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// world is one test's set-up: a task queue, a receipts schema, two fakepay processes (payment
// provider and carrier) and the worker processes it starts.
type world struct {
	t        *testing.T
	temporal *temporalServer
	queue    string
	schema   string
	dbURL    string // where the test reads the receipts and the sample's tables
	workerDB string // where workers connect, when not dbURL (through a proxy)
	payments *proc.Server
	carrier  *proc.Server
	workers  []*workerProc
	dir      string
	pool     *pgxpool.Pool // on dbURL, when it is not pgtest's
	mu       sync.Mutex
}

type worldOptions struct {
	dbURL    string          // default pgtest.URL()
	temporal *temporalServer // default the shared one
	// paymentsFlags are extra flags of the payment provider's fakepay (its webhooks).
	paymentsFlags []string
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	w := &world{t: t, temporal: cmpOr(o.temporal, shared), dbURL: o.dbURL, dir: t.TempDir()}
	if w.dbURL == "" {
		w.dbURL = pgtest.URL()
		w.schema = pgtest.Schema(t)
	} else {
		w.schema = "tempotent"
	}
	w.queue = "faults-" + strings.ReplaceAll(t.Name(), "/", "-") + fmt.Sprint(time.Now().UnixNano())
	w.payments = startFakepay(t, filepath.Join(w.dir, "payments"), o.paymentsFlags...)
	w.carrier = startFakepay(t, filepath.Join(w.dir, "carrier"))
	return w
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// startWorker starts a worker process and waits until it polls; extra are environment
// assignments such as a failpoint.
func (w *world) startWorker(extra ...string) *workerProc {
	w.t.Helper()
	p, err := w.spawnWorker(extra...)
	require.NoError(w.t, err)
	p.waitFor("worker running", 30*time.Second)
	return p
}

// spawnWorker starts a worker process without waiting for it and reports failure as an error:
// safe from goroutines other than the test's, where require could not stop the test.
func (w *world) spawnWorker(extra ...string) (*workerProc, error) {
	url := cmpOr(w.workerDB, w.dbURL)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "application_name=tempotent-worker-" + w.schema
	p := &workerProc{t: w.t, lines: make(chan string, 1000)}
	cmd := exec.Command(workerBin)
	cmd.Env = append(os.Environ(),
		"TEMPORAL_ADDRESS="+w.temporal.addr,
		"DATABASE_URL="+url,
		"TEMPOTENT_SCHEMA="+w.schema,
		"TEMPOTENT_MIGRATE=1",
		"TEMPOTENT_TASK_QUEUE="+w.queue,
		"TEMPOTENT_LOG_LEVEL=info",
		"TEMPOTENT_SHUTDOWN_GRACE=2s",
		"FAKEPAY_URL="+w.payments.URL,
		"CARRIER_URL="+w.carrier.URL,
	)
	cmd.Env = append(cmd.Env, extra...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if p.Process, err = proc.Start(cmd); err != nil {
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			p.mu.Lock()
			p.log = append(p.log, s.Text())
			p.mu.Unlock()
			select {
			case p.lines <- s.Text():
			default: // nobody is waiting for lines this old
			}
		}
	}()
	w.mu.Lock()
	w.workers = append(w.workers, p)
	w.mu.Unlock()
	w.t.Cleanup(p.Kill)
	return p, nil
}

// workerProc is a worker process: Kill is a crash (SIGKILL), Signal pauses and resumes it.
type workerProc struct {
	*proc.Process
	t     *testing.T
	lines chan string
	mu    sync.Mutex
	log   []string // every line the worker wrote
}

// logged counts the lines the worker wrote so far that contain s: how the tests see the
// receipt's guards act inside a worker (the activity package logs "tempotent: took over …",
// "tempotent: fenced out …", "tempotent: reconcile failed").
func (p *workerProc) logged(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, line := range p.log {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// awaitLogged waits until the worker wrote a line containing s.
func (p *workerProc) awaitLogged(s string, timeout time.Duration) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return p.logged(s) > 0 }, timeout, 50*time.Millisecond, "the worker did not write %q", s)
}

// Lines the activity package writes when its guards act.
const (
	logTookOver  = "tempotent: took over a receipt whose lease ended"
	logFencedOut = "tempotent: fenced out"
)

// waitFor waits until the worker writes a line containing s.
func (p *workerProc) waitFor(s string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-deadline:
			p.t.Fatalf("the worker did not write %q within %v", s, timeout)
		}
	}
}

// startFakepay runs fakepay as its own process, its ledger in state+".json", with extra flags.
func startFakepay(t *testing.T, state string, flags ...string) *proc.Server {
	t.Helper()
	srv, err := proc.StartFakepay(fakepayBin, state+".json", nil, 10*time.Second, flags...)
	require.NoError(t, err)
	t.Cleanup(srv.Kill)
	return srv
}

// order returns an order with an ID unique to the test.
func (w *world) order(name string) payment.Order {
	return payment.Order{ID: w.queue + "-" + name, Amount: 4200, Currency: "eur", Card: "tok_visa", SKU: "widget", Units: 1, Address: "1 Main St"}
}

// saga starts the order's PaymentSaga.
func (w *world) saga(o payment.Order) client.WorkflowRun {
	w.t.Helper()
	run, err := w.temporal.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: o.ID, TaskQueue: w.queue}, "PaymentSaga", o)
	require.NoError(w.t, err)
	return run
}

// result waits for a saga's result.
func (w *world) result(run client.WorkflowRun) payment.Result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var r payment.Result
	require.NoError(w.t, run.Get(ctx, &r), "saga %s", run.GetID())
	return r
}

func (w *world) ledger() fakepay.Ledger        { return ledgerOf(w.t, w.payments.URL) }
func (w *world) carrierLedger() fakepay.Ledger { return ledgerOf(w.t, w.carrier.URL) }

func ledgerOf(t *testing.T, url string) fakepay.Ledger {
	t.Helper()
	l, err := fakepay.NewClient(url).Ledger(context.Background())
	require.NoError(t, err)
	return l
}

// charges returns the payment provider's charges for an order.
func (w *world) charges(orderID string) []fakepay.LedgerCharge {
	var out []fakepay.LedgerCharge
	for _, c := range w.ledger().Charges {
		if c.Description == orderID {
			out = append(out, c)
		}
	}
	return out
}

// refunds counts the refunds of an order's charges.
func (w *world) refunds(orderID string) int {
	l := w.ledger()
	n := 0
	for _, c := range l.Charges {
		if c.Description == orderID {
			n += l.RefundsByCharge[c.ID]
		}
	}
	return n
}

func (w *world) db() *pgxpool.Pool {
	if w.dbURL == pgtest.URL() {
		return pgtest.Pool(w.t)
	}
	if w.pool == nil {
		pool, err := pgxpool.New(context.Background(), w.dbURL)
		require.NoError(w.t, err)
		w.t.Cleanup(pool.Close)
		w.pool = pool
	}
	return w.pool
}

// reconnect drops the test's own connections to a database it does not share (after a crash,
// they are dead), so that the next query connects afresh.
func (w *world) reconnect() {
	if w.pool != nil {
		w.pool.Close()
		w.pool = nil
	}
}

// pending counts receipts left pending.
func (w *world) pending() int {
	var n int
	require.NoError(w.t, w.db().QueryRow(context.Background(), "SELECT count(*) FROM "+w.schema+".receipts WHERE state = 'pending'").Scan(&n))
	return n
}

// receipt returns the state, fence and stored payload of the receipt with operation op whose
// id ends with suffix.
func (w *world) receipt(op, idSuffix string) (state string, fence int64, payload *commonpb.Payload) {
	w.t.Helper()
	var raw []byte
	require.NoError(w.t, w.db().QueryRow(context.Background(),
		"SELECT state, fence, result FROM "+w.schema+".receipts WHERE operation = $1 AND id LIKE '%' || $2",
		op, idSuffix).Scan(&state, &fence, &raw))
	if raw != nil {
		payload = new(commonpb.Payload)
		require.NoError(w.t, proto.Unmarshal(raw, payload))
	}
	return state, fence, payload
}

// receiptCount counts the receipts.
func (w *world) receiptCount() int {
	w.t.Helper()
	var n int
	require.NoError(w.t, w.db().QueryRow(context.Background(), "SELECT count(*) FROM "+w.schema+".receipts").Scan(&n))
	return n
}

// receiptRow is a receipts row as the tests check it.
type receiptRow struct {
	State          string
	Fence          int64
	Attempts       int
	EffectPossible bool
	Reservation    pgtype.UUID
	ErrorType      *string
	Fingerprint    []byte
	Result         []byte
	UpdatedAt      time.Time
}

// receiptRow returns the receipt with operation op whose id ends with idSuffix.
func (w *world) receiptRow(op, idSuffix string) receiptRow {
	w.t.Helper()
	rows := w.receiptRows(op, idSuffix)
	require.Len(w.t, rows, 1, "receipts of %s …%s", op, idSuffix)
	return rows[0]
}

// receiptRows returns the receipts with operation op whose id ends with idSuffix.
func (w *world) receiptRows(op, idSuffix string) []receiptRow {
	w.t.Helper()
	rows, err := w.db().Query(context.Background(), `SELECT state, fence, attempts, effect_possible, reservation, error_type,
		fingerprint, result, updated_at FROM `+w.schema+`.receipts WHERE operation = $1 AND id LIKE '%' || $2`, op, idSuffix)
	require.NoError(w.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[receiptRow])
	require.NoError(w.t, err)
	return out
}

// stepToken is the provider-facing token of a saga step, from the saga's own record.
func stepToken(r payment.Result, step string) string {
	for _, s := range r.Saga.Steps {
		if s.Name == step {
			return s.Token
		}
	}
	return ""
}

// activityStarted returns the started event that Temporal recorded for the first activity of
// type activityType in the run's history: for an activity that was retried it carries the
// attempt that finished and the failure of the attempt before.
func activityStarted(t *testing.T, w *world, run client.WorkflowRun, activityType string) *historypb.ActivityTaskStartedEventAttributes {
	t.Helper()
	return activityEvent(t, w, run, activityType, "started", func(ev *historypb.HistoryEvent) (*historypb.ActivityTaskStartedEventAttributes, int64) {
		a := ev.GetActivityTaskStartedEventAttributes()
		return a, a.GetScheduledEventId()
	})
}

// activityEvent returns the attributes of the first event of the run's history that attrs
// finds (returning them and their activity's scheduled event ID) for an activity of type
// activityType.
func activityEvent[A comparable](t *testing.T, w *world, run client.WorkflowRun, activityType, what string,
	attrs func(*historypb.HistoryEvent) (A, int64)) A {
	t.Helper()
	scheduled := map[int64]string{}
	iter := w.temporal.client.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, 0)
	var none A
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a, id := attrs(ev); a != none && scheduled[id] == activityType {
			return a
		}
	}
	t.Fatalf("no %s %s activity in %s", what, activityType, run.GetID())
	return none
}

// awaitAttemptFailure waits until the run's pending activity of type activityType has last
// failed with an application error of type errType whose message contains text: what Temporal
// recorded of an attempt, while the activity is still being retried.
func awaitAttemptFailure(t *testing.T, w *world, run client.WorkflowRun, activityType, errType, text string) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		d, err := w.temporal.client.DescribeWorkflow(context.Background(), run.GetID(), run.GetRunID())
		if err != nil {
			return false
		}
		for _, a := range d.RawResponse.GetPendingActivities() {
			f := a.GetLastFailure()
			if a.GetActivityType().GetName() != activityType || f == nil {
				continue
			}
			last = f.GetApplicationFailureInfo().GetType() + ": " + f.GetMessage()
			if f.GetApplicationFailureInfo().GetType() == errType && strings.Contains(f.GetMessage(), text) {
				return true
			}
		}
		return false
	}, 3*time.Minute, 100*time.Millisecond, "%s never failed with %s containing %q; last failure: %s", activityType, errType, text, last)
}

// activityResult returns the result payload that Temporal recorded for the first completed
// activity of type activityType in the run's history.
func activityResult(t *testing.T, w *world, run client.WorkflowRun, activityType string) *commonpb.Payload {
	t.Helper()
	return activityEvent(t, w, run, activityType, "completed", func(ev *historypb.HistoryEvent) (*historypb.ActivityTaskCompletedEventAttributes, int64) {
		a := ev.GetActivityTaskCompletedEventAttributes()
		return a, a.GetScheduledEventId()
	}).GetResult().GetPayloads()[0]
}
