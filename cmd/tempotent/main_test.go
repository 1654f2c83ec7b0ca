package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/saga"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// cli runs the command in process against schema, as an operator's shell would with
// DATABASE_URL and TEMPOTENT_SCHEMA set, and returns its exit code, stdout and stderr.
type cli struct {
	t      *testing.T
	schema string
}

func (c cli) run(args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"DATABASE_URL": pgtest.URL(), "TEMPOTENT_SCHEMA": c.schema}
	code = run(context.Background(), args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

// ok runs args and requires exit 0.
func (c cli) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run(args...)
	require.Equal(c.t, exitOK, code, "tempotent %s: stdout %s stderr %s", strings.Join(args, " "), out, errOut)
	return out
}

func newStore(t *testing.T) (*activity.Store, cli) {
	t.Helper()
	schema := pgtest.Schema(t)
	s, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s, cli{t: t, schema: schema}
}

// operatorOn is an operator client on schema's receipts, to check what a command did.
func operatorOn(t *testing.T, schema string) *operator.Client {
	t.Helper()
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema})
	require.NoError(t, err)
	return op
}

type charge struct {
	ID string `json:"id"`
}

// legacyCharge is a charge at a gateway that does not deduplicate: its first attempt charges
// and then hangs past its start-to-close timeout, as a worker that froze after the call would.
type legacyCharge struct{ calls atomic.Int32 }

func (g *legacyCharge) charge(ctx context.Context, amount int) (charge, error) {
	if g.calls.Add(1) == 1 {
		<-ctx.Done()
		return charge{}, ctx.Err()
	}
	return charge{ID: "ch_second"}, nil
}

// orderWorkflow charges, and hands an unknown outcome back to Temporal as a retryable failure of
// the workflow: its retry policy runs it again, and the retried run (the same keys) replays the
// receipt — the unknown outcome until someone resolves it, then the resolved result.
func orderWorkflow(ctx workflow.Context, amount int) (charge, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 5},
	})
	var c charge
	err := workflow.ExecuteActivity(ctx, "LegacyCharge", amount).Get(ctx, &c)
	if err != nil {
		return charge{}, temporal.NewApplicationError("the charge's outcome is not known yet", "ChargeOutcome", err)
	}
	return c, nil
}

// refundedWorkflow charges and then compensates: a forward receipt with its compensation's.
func refundedWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 5 * time.Second})
	s, err := saga.New(ctx, nil)
	if err != nil {
		return err
	}
	if err := s.Step(ctx, "charge", saga.Compensation{Activity: "Refund", Args: []any{struct{}{}}}, "Charge", 100).Get(ctx, nil); err != nil {
		return err
	}
	return s.Compensate(ctx)
}

func devServer(t *testing.T) client.Client {
	t.Helper()
	bin, err := filepath.Abs("../../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", bin)
	}
	return devserver.ForTest(t, bin, client.Options{Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
}

// TestUnknownOutcomeEndToEnd drives an unknown outcome through the command on the real dev
// server: the activity fails OutcomeUnknown, `receipts list` shows it, `receipts resolve
// --applied` settles it, the workflow's retry replays the resolved result, and the downstream
// was called once.
func TestUnknownOutcomeEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, tempotent := newStore(t)
	c := devServer(t)
	const queue = "operate"
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	w.RegisterWorkflowWithOptions(orderWorkflow, workflow.RegisterOptions{Name: "Order"})
	w.RegisterWorkflowWithOptions(refundedWorkflow, workflow.RegisterOptions{Name: "Refunded"})
	gateway := &legacyCharge{}
	require.NoError(t, activity.Register(w, store, "LegacyCharge", gateway.charge, activity.Options{}))
	require.NoError(t, activity.Register(w, store, "Charge", func(ctx context.Context, amount int) (charge, error) {
		return charge{ID: "ch_refundable"}, nil
	}, activity.Options{DownstreamDeduplicates: true}))
	require.NoError(t, activity.Register(w, store, "Refund", func(ctx context.Context, _ struct{}) (string, error) {
		return "re_1", nil
	}, activity.Options{DownstreamDeduplicates: true}))
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "order-1", TaskQueue: queue,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 1}}, "Order", 100)
	require.NoError(t, err)

	// list shows the unknown outcome, and who made it.
	var listed struct {
		Receipts []receiptJSON `json:"receipts"`
	}
	require.Eventually(t, func() bool {
		out := tempotent.ok("receipts", "list", "--state", "unknown", "--json")
		require.NoError(t, json.Unmarshal([]byte(out), &listed))
		return len(listed.Receipts) == 1
	}, 30*time.Second, 100*time.Millisecond, "the unknown outcome never showed in receipts list")
	r := listed.Receipts[0]
	require.Equal(t, "unknown", r.Status)
	require.True(t, r.Unresolved)
	require.Equal(t, "order-1", r.WorkflowID)
	require.Equal(t, "LegacyCharge", r.ActivityType)
	require.Equal(t, activity.ErrTypeOutcomeUnknown, r.ErrorType)
	require.Contains(t, r.ErrorMessage, "tempotent receipts resolve "+r.Token, "the error does not say what to do")

	table := tempotent.ok("receipts", "list", "--state", "unresolved")
	t.Logf("$ tempotent receipts list --state unresolved\n%s", table)
	require.Contains(t, table, r.Token)
	require.Contains(t, table, "unknown (unresolved)")
	shown := tempotent.ok("receipts", "show", r.Token)
	t.Logf("$ tempotent receipts show %s\n%s", r.Token, shown)
	for _, want := range []string{"unknown (unresolved)", "order-1", "LegacyCharge", "tempotent receipts resolve " + r.Token} {
		require.Contains(t, shown, want)
	}
	require.Contains(t, tempotent.ok("stats"), "oldest unresolved: waiting for")
	code, doctor, _ := tempotent.run("doctor")
	require.Equal(t, exitDoctor, code, "doctor passed a receipt waiting for a person:\n%s", doctor)
	require.Contains(t, doctor, "unresolved receipts waiting for someone: 1, more than --max-unresolved=0 allows")

	// An operator who looked at the gateway records what it shows.
	code, _, errOut := tempotent.run("receipts", "resolve", r.Token, "--applied", "--result", `{"id":"ch_first"}`)
	require.Equal(t, exitUsage, code, "a resolution without a reason was taken")
	require.Contains(t, errOut, "--reason")
	out := tempotent.ok("receipts", "resolve", r.Token, "--applied", "--result", `{"id":"ch_first"}`,
		"--reason", "gateway report shows ch_first", "--by", "oncall@example.com")
	require.Contains(t, out, "resolved "+r.Token+" as applied")
	t.Logf("$ tempotent receipts resolve %s --applied ...\n%s", r.Token, out)

	var got charge
	require.NoError(t, run.Get(ctx, &got), "the workflow's retry did not replay the resolved result")
	require.Equal(t, charge{ID: "ch_first"}, got)
	require.Equal(t, int32(1), gateway.calls.Load(), "the gateway was called again")

	code, _, errOut = tempotent.run("receipts", "resolve", r.Token, "--not-applied", "--reason", "changed my mind")
	require.Equal(t, exitRefused, code, "a settled receipt was resolved again")
	require.Contains(t, errOut, "is succeeded")
	shown = tempotent.ok("receipts", "show", "--workflow", "order-1")
	require.Contains(t, shown, "succeeded (resolved)")
	require.Contains(t, shown, "by oncall@example.com: gateway report shows ch_first")

	// A forward step shows its compensation's receipt, and the compensation the step it undoes.
	require.NoError(t, must(c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "refunded-1", TaskQueue: queue}, "Refunded")).Get(ctx, nil))
	var receipts []receiptJSON
	require.NoError(t, json.Unmarshal([]byte(tempotent.ok("receipts", "show", "--workflow", "refunded-1", "--json")), &receipts))
	require.Len(t, receipts, 2)
	fwd, comp := receipts[0], receipts[1]
	require.Equal(t, "charge", fwd.Operation)
	require.Len(t, fwd.Compensations, 1, "the forward step's compensation is not shown")
	require.Equal(t, comp.Token, fwd.Compensations[0].Token)
	require.Equal(t, fwd.Token, comp.Compensates)
	require.Equal(t, "Refund", comp.ActivityType)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// unknownReceipt makes one OutcomeUnknown receipt with activity.Do: an attempt charges and
// dies, and the next finds a downstream that does not deduplicate.
func unknownReceipt(t *testing.T, s *activity.Store, id string) keys.Token {
	t.Helper()
	ctx := context.Background()
	c := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Charge", ID: id}, Lease: 20 * time.Millisecond}
	c.Fingerprint, _ = keys.FingerprintOf(1)
	done, thaw := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = activity.Do(ctx, s, c, func(context.Context) (int, error) {
			<-thaw // the worker froze after the call, until the test ends
			return 0, nil
		})
	}()
	t.Cleanup(func() { close(thaw); <-done })
	time.Sleep(50 * time.Millisecond)
	for {
		_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return 1, nil })
		if err != nil && strings.Contains(err.Error(), "outcome unknown") {
			return c.Key.Token()
		}
		require.ErrorAs(t, err, new(*activity.InProgressError))
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReceiptsListPagesAndFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tempotent := newStore(t)
	for i := range 5 {
		tenant := "acme"
		if i == 4 {
			tenant = "globex"
		}
		c := activity.Call{Key: keys.Key{Namespace: "default", Tenant: tenant, Operation: "Charge", ID: fmt.Sprintf("order-%d", i)}}
		c.Fingerprint, _ = keys.FingerprintOf(i)
		_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}
	out := tempotent.ok("receipts", "list", "--limit", "2")
	require.Contains(t, out, "TOKEN")
	require.Contains(t, out, "more: add --after ")
	next := strings.TrimSpace(out[strings.LastIndex(out, "--after ")+len("--after "):])
	out = tempotent.ok("receipts", "list", "--limit", "2", "--after", next)
	require.Equal(t, 3, strings.Count(out, "\n")-2, "the second page: a header, two rows, a blank line and the cursor\n%s", out)

	require.Equal(t, 2, strings.Count(tempotent.ok("receipts", "list", "--tenant", "globex"), "\n"), "header and one row")
	require.Contains(t, tempotent.ok("receipts", "list", "--older-than", "1h"), "no receipts match")
	require.Contains(t, tempotent.ok("receipts", "list", "--state", "unresolved"), "no receipts match")

	code, _, errOut := tempotent.run("receipts", "list", "--state", "stuck")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give pending, completed, failed")
	code, _, errOut = tempotent.run("receipts", "list", "--after", "garbage")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "page cursor")

	k := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "order-1"}
	require.Contains(t, tempotent.ok("receipts", "show", "--key", "default/acme/Charge/order-1"), string(k.Token()))
	code, _, errOut = tempotent.run("receipts", "show", "no-such-token")
	require.Equal(t, exitRefused, code)
	require.Contains(t, errOut, "no receipt under token no-such-token")
}

func TestResolveNotAppliedAndRefusals(t *testing.T) {
	t.Parallel()
	s, tempotent := newStore(t)
	tok := unknownReceipt(t, s, "order-9")

	for _, args := range [][]string{
		{"receipts", "resolve", string(tok), "--reason", "x"},                                   // neither
		{"receipts", "resolve", string(tok), "--applied", "--not-applied", "--reason", "x"},     // both
		{"receipts", "resolve", string(tok), "--applied", "--reason", "x"},                      // no result
		{"receipts", "resolve", string(tok), "--applied", "--result", "{nope", "--reason", "x"}, // not JSON
		{"receipts", "resolve", string(tok), "--not-applied", "--result", "1", "--reason", "x"}, // result for nothing
		{"receipts", "resolve", "--not-applied", "--reason", "x"},                               // no token
	} {
		code, _, errOut := tempotent.run(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	r, err := operatorOn(t, tempotent.schema).Receipt(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, operator.StatusUnknown, r.Status, "a refused command line changed the receipt")

	out := tempotent.ok("receipts", "resolve", string(tok), "--not-applied", "--reason", "no charge in the gateway's report")
	require.Contains(t, out, "calls the downstream again under the same token")
	require.Contains(t, out, "lease ended (resolved)")
	code, _, errOut := tempotent.run("receipts", "resolve", "no-such-token", "--not-applied", "--reason", "x")
	require.Equal(t, exitRefused, code)
	require.Contains(t, errOut, "no receipt")
}

func TestMigrateDoctorPurgeStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	tempotent := cli{t: t, schema: schema}

	code, out, _ := tempotent.run("doctor")
	require.Equal(t, exitDoctor, code, "doctor passed an unmigrated schema:\n%s", out)
	require.Contains(t, out, "lacks migrations 001_receipts")

	// What --print writes, applied by someone else's tool, is a migrated schema.
	script := tempotent.ok("migrate", "--print")
	_, err := pgtest.Pool(t).Exec(ctx, script)
	require.NoError(t, err)
	require.Contains(t, tempotent.ok("migrate"), "is up to date")
	out = tempotent.ok("doctor")
	require.Contains(t, out, "has all")
	require.Contains(t, out, "indexes present")
	require.Contains(t, out, "nothing unresolved")

	_, err = pgtest.Pool(t).Exec(ctx, "DROP INDEX "+schema+".receipts_token_idx")
	require.NoError(t, err)
	code, out, _ = tempotent.run("doctor")
	require.Equal(t, exitDoctor, code)
	require.Contains(t, out, "indexes missing in schema")
	require.Contains(t, out, "receipts_token_idx")
	code, out, _ = tempotent.run("doctor", "--retention", "1h")
	require.Equal(t, exitDoctor, code, "the index is still missing")
	require.Contains(t, out, "warn  retention 1h is shorter than the downstreams' key memory")

	fresh := cli{t: t, schema: pgtest.Schema(t)}
	require.Contains(t, fresh.ok("migrate"), "applied 001_receipts, 002_reservation_identity")
	s, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: fresh.schema})
	require.NoError(t, err)
	for i := range 3 {
		c := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Charge", ID: fmt.Sprintf("old-%d", i)}}
		c.Fingerprint, _ = keys.FingerprintOf(i)
		_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}
	unknown := unknownReceipt(t, s, "order-unknown")
	_, err = pgtest.Pool(t).Exec(ctx, "UPDATE "+fresh.schema+".receipts SET expires_at = now() - interval '1 second'")
	require.NoError(t, err)
	out = fresh.ok("stats")
	require.Contains(t, out, "past their retention, not purged yet: 4")
	var st struct {
		Total struct{ Succeeded, Unknown, Unresolved int64 } `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(fresh.ok("stats", "--json")), &st))
	require.Equal(t, int64(3), st.Total.Succeeded)
	require.Equal(t, int64(1), st.Total.Unknown)

	require.Contains(t, fresh.ok("purge", "--batch", "2"), "purged 2 receipts")
	out = fresh.ok("purge", "--batch", "2", "--until-done")
	require.Contains(t, out, "purged 1 receipts")
	require.Contains(t, out, "1 unresolved receipts are kept")
	_, err = operatorOn(t, fresh.schema).Receipt(ctx, unknown)
	require.NoError(t, err, "purge deleted an unresolved receipt")
}

func TestPartitionCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tempotent := cli{t: t, schema: pgtest.Schema(t)}
	tempotent.ok("migrate")
	require.Contains(t, tempotent.ok("receipts", "partition"), "receipts are partitioned by day")
	require.Contains(t, tempotent.ok("receipts", "partition"), "already partitioned")
	require.Contains(t, tempotent.ok("doctor"), "indexes present")

	// Once the old table's partition is gone, its index names are too: the doctor looks for the
	// partitioned table's own.
	_, err := pgtest.Pool(t).Exec(ctx, "DROP TABLE "+tempotent.schema+".receipts_legacy")
	require.NoError(t, err)
	require.Contains(t, tempotent.ok("doctor"), "indexes present")
	_, err = pgtest.Pool(t).Exec(ctx, "DROP INDEX "+tempotent.schema+".receipts_partitioned_token_idx")
	require.NoError(t, err)
	code, out, _ := tempotent.run("doctor")
	require.Equal(t, exitDoctor, code)
	require.Contains(t, out, "receipts_partitioned_token_idx")
	require.Contains(t, tempotent.ok("purge"), "purged 0 receipts")
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	tempotent := cli{t: t, schema: "tempotent"}
	code, out, _ := tempotent.run()
	require.Equal(t, exitUsage, code)
	require.Contains(t, out, "receipts resolve")
	for _, name := range []string{"receipts list", "receipts show", "receipts resolve", "receipts rearm", "receipts partition", "purge", "stats", "migrate", "doctor"} {
		code, out, _ := tempotent.run(append(strings.Fields(name), "--help")...)
		require.Equal(t, exitOK, code, name)
		require.Contains(t, out, "Usage: tempotent "+name, name)
	}
	code, _, errOut := tempotent.run("receipts", "frobnicate")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give list, show, resolve, rearm or partition")
	code, _, errOut = tempotent.run("stats", "--database-url", "postgres://nobody@127.0.0.1:1/none")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "does not answer")
	require.Contains(t, errOut, "DATABASE_URL")
}

// A token is base64url, so one in 64 begins with "-": the flag package alone would take it for
// a flag and every command would refuse the receipt.
func TestTokensThatBeginWithADash(t *testing.T) {
	t.Parallel()
	s, tempotent := newStore(t)
	var id string
	for i := 0; ; i++ {
		id = fmt.Sprintf("order-%d", i)
		if k := (keys.Key{Namespace: "default", Operation: "Charge", ID: id}); k.Token()[0] == '-' {
			break
		}
	}
	tok := string(unknownReceipt(t, s, id))
	require.Equal(t, byte('-'), tok[0], "unknownReceipt's key is not the one searched for")

	require.Contains(t, tempotent.ok("receipts", "show", tok), "unknown")
	require.Contains(t, tempotent.ok("receipts", "show", "--", tok), "unknown")
	require.Contains(t, tempotent.ok("receipts", "resolve", "--not-applied", tok, "--reason", "checked"), "resolved "+tok)

	// As a flag's value the same string stays the value.
	f := (&app{getenv: func(string) string { return "" }}).flags("x", "", "")
	reason := f.String("reason", "", "")
	require.NoError(t, f.parse([]string{"--reason", tok, "pos"}))
	require.Equal(t, tok, *reason)
	require.Equal(t, []string{"pos"}, f.args)
}
