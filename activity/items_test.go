package activity_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
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
