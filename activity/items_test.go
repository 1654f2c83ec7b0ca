package activity_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
)

type Payee struct {
	ID     string
	Amount int
}

type Transfer struct {
	ID    string
	Payee string
}

// payouts is a downstream that deduplicates on the token, as Stripe does, and counts what
// reached it per payee: requests, and transfers made.
type payouts struct {
	mu        sync.Mutex
	byToken   map[keys.Token]Transfer
	requests  map[string]int
	transfers map[string]int
	// failFrom makes the requests for payees at or after it fail with a retryable error, as a
	// worker that dies there would leave them.
	failFrom map[string]bool
}

func newPayouts() *payouts {
	return &payouts{byToken: map[keys.Token]Transfer{}, requests: map[string]int{}, transfers: map[string]int{}, failFrom: map[string]bool{}}
}

func (p *payouts) pay(ctx context.Context, payee Payee) (Transfer, error) {
	tok, ok := keys.TokenFrom(ctx)
	if !ok {
		return Transfer{}, errors.New("no token")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests[payee.ID]++
	if p.failFrom[payee.ID] {
		return Transfer{}, errors.New("gateway unavailable")
	}
	if t, ok := p.byToken[tok]; ok {
		return t, nil
	}
	t := Transfer{ID: fmt.Sprintf("tr_%d", len(p.byToken)+1), Payee: payee.ID}
	p.byToken[tok] = t
	p.transfers[payee.ID]++
	return t, nil
}

func (p *payouts) requireEachPaidOnce(t *testing.T, payees []Payee) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, payee := range payees {
		require.Equal(t, 1, p.transfers[payee.ID], "payee %s", payee.ID)
	}
}

func payeesN(n int) []Payee {
	payees := make([]Payee, n)
	for i := range payees {
		payees[i] = Payee{ID: fmt.Sprintf("seller-%03d", i), Amount: 100 + i}
	}
	return payees
}

var payeeID = func(p Payee) string { return p.ID }

// countedStore is a migrated store whose pool counts its round trips.
func countedStore(t *testing.T) (*activity.Store, string, *pgtest.Counter) {
	t.Helper()
	schema := pgtest.Schema(t)
	trips := &pgtest.Counter{}
	s, err := activity.NewStore(pgtest.CountingPool(t, trips), &activity.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s, schema, trips
}

// payOut is a plain batch activity: each payee under its own receipt, in the pass "Transfer".
func payOut(s *activity.Store, p *payouts, concurrency int) func(context.Context, []Payee) ([]Transfer, error) {
	return payOutAs("Transfer", s, p, concurrency)
}

// payOutAs is payOut with the pass named operation.
func payOutAs(operation string, s *activity.Store, p *payouts, concurrency int) func(context.Context, []Payee) ([]Transfer, error) {
	return func(ctx context.Context, payees []Payee) ([]Transfer, error) {
		results, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: operation, Concurrency: concurrency,
			Options: activity.Options{DownstreamDeduplicates: true}}, p.pay)
		if err != nil {
			return nil, err
		}
		out := make([]Transfer, len(results))
		for i, r := range results {
			if r.Err != nil {
				return nil, r.Err
			}
			out[i] = r.Out
		}
		return out, nil
	}
}

func runPayOut(t *testing.T, s *activity.Store, p *payouts, payees []Payee, concurrency int) ([]Transfer, error) {
	t.Helper()
	env := newActivityEnv("payout", "batch-1")
	env.RegisterActivityWithOptions(payOut(s, p, concurrency), sdkactivity.RegisterOptions{Name: "PayOut"})
	return executePayOut(t, env, payees)
}

// executePayOut runs the activity PayOut registered on env and decodes its transfers.
func executePayOut(t *testing.T, env *testsuite.TestActivityEnvironment, payees []Payee) ([]Transfer, error) {
	t.Helper()
	val, err := env.ExecuteActivity("PayOut", payees)
	if err != nil {
		return nil, err
	}
	var out []Transfer
	require.NoError(t, val.Get(&out))
	return out, nil
}

func TestForEachRetryRunsOnlyWhatIsLeft(t *testing.T) {
	t.Parallel()
	s, schema, trips := countedStore(t)
	p := newPayouts()
	payees := payeesN(50)
	for _, payee := range payees[30:] {
		p.failFrom[payee.ID] = true
	}

	_, err := runPayOut(t, s, p, payees, 1)
	requireErrType(t, err, activity.ErrTypeBatchUnfinished)
	require.Contains(t, err.Error(), "20 of 50 items unfinished")

	clear(p.failFrom)
	first, err := runPayOut(t, s, p, payees, 1)
	require.NoError(t, err)
	p.requireEachPaidOnce(t, payees)
	for _, payee := range payees[:30] {
		require.Equal(t, 1, p.requests[payee.ID], "a settled payee was asked again: %s", payee.ID)
	}
	require.Equal(t, 50, countReceipts(t, schema))

	// A retry of the finished batch: one statement reads every item, nothing is called.
	before := trips.RoundTrips()
	again, err := runPayOut(t, s, p, payees, 1)
	require.NoError(t, err)
	require.Equal(t, first, again, "the replay is not what was recorded")
	require.Equal(t, int64(1), trips.RoundTrips()-before, "a retry of a settled batch read its items in more than one round trip")
	p.requireEachPaidOnce(t, payees)
}

// Heartbeat details are a hint: an activity that resumes from one that is behind repeats
// nothing, since every item it runs again replays.
func TestForEachStaleHeartbeatRepeatsNothing(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	payees := payeesN(40)
	for _, payee := range payees[25:] {
		p.failFrom[payee.ID] = true
	}
	resume := func(ctx context.Context, payees []Payee) (int, error) {
		var from activity.Progress
		if sdkactivity.HasHeartbeatDetails(ctx) {
			if err := sdkactivity.GetHeartbeatDetails(ctx, &from); err != nil {
				return 0, err
			}
		}
		results, err := activity.ForEach(ctx, s, payees[from.Settled:], activity.Items[Payee]{ID: payeeID, Operation: "Transfer",
			Options: activity.Options{DownstreamDeduplicates: true}}, p.pay)
		replayed := 0
		for _, r := range results {
			if r.Replayed {
				replayed++
			}
		}
		return replayed, err
	}
	run := func(stale *activity.Progress) (int, error) {
		env := newActivityEnv("payout", "batch-stale")
		if stale != nil {
			env.SetHeartbeatDetails(*stale)
		}
		env.RegisterActivityWithOptions(resume, sdkactivity.RegisterOptions{Name: "PayOut"})
		val, err := env.ExecuteActivity("PayOut", payees)
		if err != nil {
			return 0, err
		}
		var replayed int
		require.NoError(t, val.Get(&replayed))
		return replayed, nil
	}
	_, err := run(nil)
	requireErrType(t, err, activity.ErrTypeBatchUnfinished)
	clear(p.failFrom)
	replayed, err := run(&activity.Progress{Settled: 10, Total: 40}) // 25 were settled
	require.NoError(t, err)
	require.Equal(t, 15, replayed, "items 10–24 are settled and must replay")
	p.requireEachPaidOnce(t, payees)
	for _, payee := range payees[10:25] {
		require.Equal(t, 1, p.requests[payee.ID], "payee %s was asked again", payee.ID)
	}
}

func TestForEachMismatchIsThatItemsAlone(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	payees := payeesN(5)
	_, err := runPayOut(t, s, p, payees, 1)
	require.NoError(t, err)

	changed := append([]Payee(nil), payees...)
	changed[2].Amount = 999_999
	changed = append(changed, Payee{ID: "seller-new", Amount: 1}, Payee{ID: "seller-new", Amount: 1}, Payee{ID: "seller-new", Amount: 2})
	var results []activity.ItemResult[Transfer]
	env := newActivityEnv("payout", "batch-1")
	env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) (err error) {
		results, err = activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer",
			Options: activity.Options{DownstreamDeduplicates: true}}, p.pay)
		return err
	}, sdkactivity.RegisterOptions{Name: "PayOut"})
	_, err = env.ExecuteActivity("PayOut", changed)
	require.NoError(t, err, "a mismatch is settled: the batch is not unfinished")

	require.Len(t, results, 8)
	for i, r := range results {
		switch i {
		case 2, 7:
			require.ErrorAs(t, r.Err, new(*activity.MismatchError), "item %d", i)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, r.Err, &appErr)
			require.Equal(t, activity.ErrTypePayloadMismatch, appErr.Type())
			require.True(t, r.Settled())
		case 6:
			require.NoError(t, r.Err)
			require.True(t, r.Replayed, "a second item with the same ID and request is the first one's intent")
			require.Equal(t, results[5].Out, r.Out)
		default:
			require.NoError(t, r.Err, "item %d", i)
			require.Equal(t, i < 5, r.Replayed, "item %d", i)
		}
	}
	require.Equal(t, 1, p.requests["seller-002"], "a mismatched item reached the downstream")
	require.Equal(t, 1, p.requests["seller-new"])
}

func TestForEachConcurrentItemsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	payees := payeesN(200)
	out, err := runPayOut(t, s, p, payees, 8)
	require.NoError(t, err)
	for i, tr := range out {
		require.Equal(t, payees[i].ID, tr.Payee)
	}
	again, err := runPayOut(t, s, p, payees, 8)
	require.NoError(t, err)
	require.Equal(t, out, again)
	p.requireEachPaidOnce(t, payees)
}

// Misuse that would go wrong later, after a crash, is refused at the first run.
func TestForEachRefusesMisuse(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()

	_, err := activity.ForEach(context.Background(), s, payeesN(1), activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, p.pay)
	require.ErrorIs(t, err, activity.ErrMisconfigured, "outside an activity")

	env := newActivityEnv("payout", "no-id")
	env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) error {
		_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{}, p.pay)
		return err
	}, sdkactivity.RegisterOptions{Name: "NoID"})
	_, err = env.ExecuteActivity("NoID", payeesN(1))
	require.ErrorContains(t, err, "Items.ID is required")

	// Registered without Batch: a crash would leave the batch's own receipt unresolved.
	env = newActivityEnv("payout", "registered")
	require.NoError(t, activity.Register(env, s, "PayOut", payOut(s, p, 1), activity.Options{}))
	_, err = env.ExecuteActivity("PayOut", payeesN(1))
	require.ErrorContains(t, err, "Options{Batch: true}")

	// An item ID that cannot be a key is that item's error, before anything is called.
	env = newActivityEnv("payout", "bad-id")
	var results []activity.ItemResult[Transfer]
	env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) (err error) {
		results, err = activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, p.pay)
		return err
	}, sdkactivity.RegisterOptions{Name: "BadID"})
	_, err = env.ExecuteActivity("BadID", []Payee{{ID: ""}, {ID: "ok"}})
	require.NoError(t, err)
	require.ErrorIs(t, results[0].Err, keys.ErrInvalidKey)
	require.NoError(t, results[1].Err)
	require.Zero(t, p.requests[""])
}

func TestForEachInARegisteredBatchActivity(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	p := newPayouts()
	payees := payeesN(20)
	for _, payee := range payees[12:] {
		p.failFrom[payee.ID] = true
	}
	run := func() ([]Transfer, error) {
		env := newActivityEnv("payout", "registered-batch")
		// The pass is named as the activity's own operation: its items' receipts live beside
		// the batch's own, and no key of theirs equals it.
		require.NoError(t, activity.Register(env, s, "PayOut", payOutAs("payout", s, p, 4), activity.Options{Batch: true}))
		return executePayOut(t, env, payees)
	}
	_, err := run()
	requireErrType(t, err, activity.ErrTypeBatchUnfinished)
	clear(p.failFrom)
	first, err := run() // takes the batch's receipt over, replays 12 items, runs 8
	require.NoError(t, err)
	again, err := run() // the batch's receipt replays
	require.NoError(t, err)
	require.Equal(t, first, again)
	p.requireEachPaidOnce(t, payees)
	require.Equal(t, 21, countReceipts(t, schema), "one receipt for the batch and one per item")
	var operations int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(DISTINCT operation) FROM "+schema+".receipts").Scan(&operations))
	require.Equal(t, 1, operations, "the items ran under another operation than the batch's own")
}

// A heartbeat — ForEach's own after each item, or one in an item — extends the batch's lease and
// the lease of every item running.
func TestForEachHeartbeatsExtendItemLeases(t *testing.T) {
	t.Parallel()
	s, schema := setup(t, nil)
	env := newWorkflowEnv(t)
	env.SetTestTimeout(30 * time.Second)
	db := pgtest.Pool(t) // the activity runs on the SDK's goroutine, where t must not fail
	var (
		mu                    sync.Mutex // the items run at once: the least each lease had left, over both
		itemLease, batchLease time.Duration
		recorded              bool
	)
	leaseLeft := func(ctx context.Context, idPrefix string) (time.Duration, error) {
		var us int64
		err := db.QueryRow(ctx, "SELECT min((extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint) FROM "+schema+
			".receipts WHERE state = 'pending' AND id LIKE $1", idPrefix+"%").Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	}
	slow := func(ctx context.Context, payee Payee) (Transfer, error) {
		// Heartbeat for three heartbeat timeouts: without extension both leases would end.
		for range 15 {
			sdkactivity.RecordHeartbeat(ctx, payee.ID)
			time.Sleep(200 * time.Millisecond)
		}
		item, err := leaseLeft(ctx, "item:")
		var batch time.Duration
		if err == nil {
			batch, err = leaseLeft(ctx, "wf:")
		}
		mu.Lock()
		if !recorded {
			itemLease, batchLease, recorded = item, batch, true
		}
		itemLease, batchLease = min(itemLease, item), min(batchLease, batch)
		mu.Unlock()
		return Transfer{Payee: payee.ID}, err
	}
	require.NoError(t, activity.Register(env, s, "PayOut", func(ctx context.Context, payees []Payee) (int, error) {
		results, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer", Concurrency: 2}, slow)
		return len(results), err
	}, activity.Options{Batch: true}))
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second})
		return workflow.ExecuteActivity(ctx, "PayOut", payeesN(2)).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "PayOutWorkflow"})
	env.ExecuteWorkflow("PayOutWorkflow")
	require.NoError(t, env.GetWorkflowError())
	require.Greater(t, itemLease, time.Duration(0), "an item's lease ended while it was heartbeating")
	require.Greater(t, batchLease, time.Duration(0), "the batch's lease ended while an item was heartbeating")
}

// requireErrType requires err to be a retryable application error of type errType: what a
// workflow sees of an activity's error.
func requireErrType(t *testing.T, err error, errType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, errType, appErr.Type(), "%v", err)
	require.False(t, appErr.NonRetryable(), "%v", err)
}

// A panic in an item running beside others is the activity's panic, as the SDK reports it, not
// the end of the worker process.
func TestForEachPanicInAnItemFailsTheActivity(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	env := newActivityEnv("payout", "panics")
	env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) error {
		_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer", Concurrency: 4},
			func(_ context.Context, p Payee) (int, error) {
				if p.ID == "seller-005" {
					panic("bug in the payee code")
				}
				return 1, nil
			})
		return err
	}, sdkactivity.RegisterOptions{Name: "Panics"})
	_, err := env.ExecuteActivity("Panics", payeesN(20))
	var panicErr *temporal.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Contains(t, panicErr.Error(), "bug in the payee code")
}

// Two passes over the same items (pay each seller, then notify each) need a name each: under
// one, the second pass would replay the first pass's receipts instead of running. ForEach refuses
// the name when the passes' types differ; the same pass again under its name is allowed.
func TestForEachOneNameIsOnePass(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	notified := 0
	notify := func(_ context.Context, payee Payee) (string, error) { notified++; return "msg-" + payee.ID, nil }
	twoPasses := func(notifyOp string) func(ctx context.Context, payees []Payee) error {
		return func(ctx context.Context, payees []Payee) error {
			for range 2 { // the same pass twice in one attempt, as a loop over the unfinished would
				if _, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, p.pay); err != nil {
					return err
				}
			}
			_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: notifyOp}, notify)
			return err
		}
	}
	env := newActivityEnv("payout", "passes-one-name")
	env.RegisterActivityWithOptions(twoPasses("Transfer"), sdkactivity.RegisterOptions{Name: "PayAndNotify"})
	_, err := env.ExecuteActivity("PayAndNotify", payeesN(3))
	temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
	require.ErrorContains(t, err, `the pass "Transfer" already ran in this attempt`)
	require.ErrorContains(t, err, "give each pass its own Items.Operation")
	require.NotContains(t, err.Error(), "interceptor")
	require.Zero(t, notified)

	env = newActivityEnv("payout", "passes-named")
	env.RegisterActivityWithOptions(twoPasses("Notify"), sdkactivity.RegisterOptions{Name: "PayAndNotify"})
	_, err = env.ExecuteActivity("PayAndNotify", payeesN(3))
	require.NoError(t, err)
	require.Equal(t, 3, notified, "the notify pass replayed the pay pass's receipts")
}

// ForEach heartbeats after each item, with its progress as details: a batch activity with a
// heartbeat timeout needs no heartbeat of its own.
func TestForEachHeartbeatsItsProgress(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	env := newActivityEnv("payout", "progress")
	heartbeats := recordProgress(env)
	env.RegisterActivityWithOptions(payOut(s, p, 1), sdkactivity.RegisterOptions{Name: "PayOut"})
	_, err := executePayOut(t, env, payeesN(5))
	require.NoError(t, err)
	seen := heartbeats()
	require.NotEmpty(t, seen, "ForEach did not heartbeat")
	// The SDK sends the first heartbeat at once and throttles the rest.
	require.Equal(t, activity.Progress{Settled: 1, Total: 5}, seen[0])
}

// An item error whose type the activity's retry policy names as non-retryable is recorded as
// final, as a single activity's is: the item is settled, and the batch is not unfinished. (Else
// the attempt that recorded it would fail the batch, and with MaximumAttempts 1 the activity.)
// The SDK's test environments leave the retry policy out of the activity's info, so this runs on
// the dev server.
func TestForEachRetryPolicyDecidesWhatIsSettled(t *testing.T) { // not parallel: t.Setenv
	s, _ := setup(t, nil)
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	t.Setenv("TEMPORAL_CLI", cli)
	c := activitytest.NewDevServer(t)
	queue := "foreach-policy"
	w := worker.New(c, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{activity.NewInterceptor()}})
	w.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) (int, error) {
		results, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, func(_ context.Context, p Payee) (int, error) {
			if p.ID == "seller-001" {
				return 0, temporal.NewApplicationError("account closed", "AccountClosed") // retryable by its own flag
			}
			return 1, nil
		})
		if err != nil {
			return 0, err
		}
		settled := 0
		for _, r := range results {
			if r.Settled() {
				settled++
			}
		}
		return settled, nil
	}, sdkactivity.RegisterOptions{Name: "PayOut"})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) (int, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1, NonRetryableErrorTypes: []string{"AccountClosed"}}})
		var settled int
		err := workflow.ExecuteActivity(ctx, "PayOut", payeesN(3)).Get(ctx, &settled)
		return settled, err
	}, workflow.RegisterOptions{Name: "PayOutWorkflow"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "payout-policy", TaskQueue: queue}, "PayOutWorkflow")
	require.NoError(t, err)
	var settled int
	require.NoError(t, run.Get(ctx, &settled), "an item the retry policy makes final left the batch unfinished")
	require.Equal(t, 3, settled)
}

// Each misuse of ForEach is refused with a message that names what is wrong and what to do. None
// of them is a missing interceptor, so none says to install it; the worker without the
// interceptor still does.
func TestForEachMisuseSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	p := newPayouts()
	items := func(o activity.Items[Payee]) func(context.Context, []Payee) error {
		return func(ctx context.Context, payees []Payee) error {
			_, err := activity.ForEach(ctx, s, payees, o, p.pay)
			return err
		}
	}
	run := func(t *testing.T, env *testsuite.TestActivityEnvironment, fn func(context.Context, []Payee) error) error {
		t.Helper()
		env.RegisterActivityWithOptions(fn, sdkactivity.RegisterOptions{Name: "PayOut"})
		_, err := env.ExecuteActivity("PayOut", payeesN(2))
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
		return err
	}
	requireCause := func(t *testing.T, err error, cause string) {
		t.Helper()
		require.ErrorContains(t, err, cause)
		require.NotContains(t, err.Error(), "interceptor", "the message blames the interceptor for another misuse")
	}

	t.Run("OutsideAnActivity", func(t *testing.T) {
		_, err := activity.ForEach(context.Background(), s, payeesN(1), activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, p.pay)
		require.ErrorIs(t, err, activity.ErrMisconfigured)
		requireCause(t, err, "call it inside an activity")
	})
	t.Run("NoID", func(t *testing.T) {
		requireCause(t, run(t, newActivityEnv("payout", "no-id"), items(activity.Items[Payee]{})), "Items.ID is required")
	})
	t.Run("NoOperation", func(t *testing.T) {
		err := run(t, newActivityEnv("payout", "no-operation"), items(activity.Items[Payee]{ID: payeeID}))
		requireCause(t, err, "Items.Operation is required; name the pass")
	})
	t.Run("InvalidOperation", func(t *testing.T) {
		err := run(t, newActivityEnv("payout", "bad-operation"), items(activity.Items[Payee]{ID: payeeID, Operation: "Transfer\n"}))
		requireCause(t, err, `Items.Operation "Transfer\n" is the items' key operation: invalid idempotency key: operation has control character`)
		err = run(t, newActivityEnv("payout", "long-operation"), items(activity.Items[Payee]{ID: payeeID, Operation: strings.Repeat("x", keys.MaxNameLen+1)}))
		requireCause(t, err, "operation is 256 bytes; the limit is 255")
		require.Zero(t, p.requests["seller-000"], "an item ran under an invalid operation")
	})
	t.Run("InvalidOptions", func(t *testing.T) {
		err := run(t, newActivityEnv("payout", "bad-options"),
			items(activity.Items[Payee]{ID: payeeID, Operation: "Transfer", Options: activity.Options{DownstreamKeyMemory: -time.Second}}))
		requireCause(t, err, "Options.DownstreamKeyMemory is negative")
	})
	t.Run("RegisteredWithoutBatch", func(t *testing.T) {
		env := newActivityEnv("payout", "no-batch")
		require.NoError(t, activity.Register(env, s, "PayOut", payOut(s, p, 1), activity.Options{}))
		_, err := env.ExecuteActivity("PayOut", payeesN(1))
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
		requireCause(t, err, "register it with Options{Batch: true}")
	})
	t.Run("WithoutTheInterceptor", func(t *testing.T) {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: keys.Given(context.Background(), "payout", "no-interceptor")})
		err := run(t, env, items(activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}))
		require.ErrorContains(t, err, "install activity.NewInterceptor()", "a plain activity")

		env = suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: keys.Given(context.Background(), "payout", "no-interceptor")})
		require.NoError(t, activity.Register(env, s, "PayOut", payOut(s, p, 1), activity.Options{Batch: true}))
		_, err = env.ExecuteActivity("PayOut", payeesN(1))
		temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
		require.ErrorContains(t, err, "install activity.NewInterceptor()", "a registered activity")
	})
}

// mailer sends one kind of message to payees, and logs what it sent.
type mailer struct {
	kind string
	mu   *sync.Mutex
	sent map[string]int // "kind/payee" → messages
}

func (m mailer) Send(_ context.Context, p Payee) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent[m.kind+"/"+p.ID]++
	return m.kind + "-" + p.ID, nil
}

// sendAs returns a closure of one function literal for each kind. It is not inlined: inlined at
// two call sites, the literal would compile to two functions.
//
//go:noinline
func sendAs(kind string, mu *sync.Mutex, sent map[string]int) func(context.Context, Payee) (string, error) {
	return func(ctx context.Context, p Payee) (string, error) {
		return mailer{kind: kind, mu: mu, sent: sent}.Send(ctx, p)
	}
}

// A pass over the items is named (Items.Operation), not guessed from its function: two closures
// of one function literal, or two method values of one method, are two passes with one code
// pointer. Unnamed, a pass is refused before anything is sent; named apart, each pass sends to
// every item.
func TestForEachPassesAreNamedNotGuessed(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	type send = func(context.Context, Payee) (string, error)
	var (
		mu   sync.Mutex
		sent = map[string]int{}
	)
	payoutMailer, statementMailer := mailer{kind: "payout", mu: &mu, sent: sent}, mailer{kind: "statement", mu: &mu, sent: sent}
	for _, tc := range []struct {
		name          string
		first, second send
	}{
		{"ClosuresOfOneLiteral", sendAs("payout", &mu, sent), sendAs("statement", &mu, sent)},
		{"MethodValuesOfOneMethod", payoutMailer.Send, statementMailer.Send},
	} {
		t.Run(tc.name, func(t *testing.T) {
			twoPasses := func(first, second string) func(context.Context, []Payee) error {
				return func(ctx context.Context, payees []Payee) error {
					for _, pass := range []struct {
						name string
						fn   send
					}{{first, tc.first}, {second, tc.second}} {
						if _, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: pass.name}, pass.fn); err != nil {
							return err
						}
					}
					return nil
				}
			}
			mu.Lock()
			clear(sent)
			mu.Unlock()
			env := newActivityEnv("mailing", tc.name+"-unnamed")
			env.RegisterActivityWithOptions(twoPasses("", ""), sdkactivity.RegisterOptions{Name: "Mail"})
			_, err := env.ExecuteActivity("Mail", payeesN(2))
			temporaltest.RequireAppError(t, err, activity.ErrTypeMisconfigured, false)
			require.ErrorContains(t, err, "Items.Operation is required")
			mu.Lock()
			require.Empty(t, sent, "a pass without a name ran")
			mu.Unlock()

			env = newActivityEnv("mailing", tc.name+"-named")
			env.RegisterActivityWithOptions(twoPasses("Payout", "Statement"), sdkactivity.RegisterOptions{Name: "Mail"})
			_, err = env.ExecuteActivity("Mail", payeesN(2))
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{"payout/seller-000": 1, "payout/seller-001": 1, "statement/seller-000": 1, "statement/seller-001": 1}, sent,
				"each pass sends to each item once")
		})
	}
}

// Progress counts as settled only the items with a final outcome: a batch whose items all failed
// with retryable errors has settled none, and a declined item is settled, and failed.
func TestForEachProgressCountsOnlySettledItems(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	// firstProgress runs a batch of 3 payees through pay and returns its first heartbeat: the
	// SDK sends the first at once and throttles the rest.
	firstProgress := func(t *testing.T, id string, pay func(context.Context, Payee) (int, error)) activity.Progress {
		t.Helper()
		env := newActivityEnv("payout", id)
		heartbeats := recordProgress(env)
		env.RegisterActivityWithOptions(func(ctx context.Context, payees []Payee) error {
			_, err := activity.ForEach(ctx, s, payees, activity.Items[Payee]{ID: payeeID, Operation: "Transfer"}, pay)
			return err
		}, sdkactivity.RegisterOptions{Name: "PayOut"})
		_, _ = env.ExecuteActivity("PayOut", payeesN(3))
		seen := heartbeats()
		require.NotEmpty(t, seen, "ForEach did not heartbeat")
		return seen[0]
	}
	t.Run("AllFailed", func(t *testing.T) {
		progress := firstProgress(t, "all-failed", func(context.Context, Payee) (int, error) {
			return 0, errors.New("gateway unavailable") // retryable: left to the retry
		})
		require.Equal(t, activity.Progress{Settled: 0, Failed: 0, Total: 3}, progress, "a retryable failure counted as settled or failed")
	})
	t.Run("Declined", func(t *testing.T) {
		progress := firstProgress(t, "declined", func(context.Context, Payee) (int, error) {
			return 0, temporal.NewNonRetryableApplicationError("card declined", "Declined", nil) // final
		})
		require.Equal(t, activity.Progress{Settled: 1, Failed: 1, Total: 3}, progress, "a decline is settled and failed")
	})
}

// recordProgress records the Progress of every heartbeat env's activity sends, and returns
// what it recorded so far.
func recordProgress(env *testsuite.TestActivityEnvironment) func() []activity.Progress {
	var (
		mu   sync.Mutex
		seen []activity.Progress
	)
	env.SetOnActivityHeartbeatListener(func(_ *sdkactivity.Info, details converter.EncodedValues) {
		var progress activity.Progress
		if details.Get(&progress) == nil {
			mu.Lock()
			seen = append(seen, progress)
			mu.Unlock()
		}
	})
	return func() []activity.Progress {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
