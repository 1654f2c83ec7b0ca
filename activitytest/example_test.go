package activitytest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// exampleTB stands in for the *testing.T of a test function, so that the examples run: it
// prints failures, and runs the cleanups when the example ends.
type exampleTB struct {
	testing.TB
	failed   bool
	cleanups []func()
}

func (e *exampleTB) Helper()                   {}
func (e *exampleTB) Name() string              { return "Example" }
func (e *exampleTB) Cleanup(f func())          { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Failed() bool              { return e.failed }
func (e *exampleTB) Logf(string, ...any)       {}
func (e *exampleTB) Errorf(f string, a ...any) { e.failed = true; fmt.Printf(f+"\n", a...) }
func (e *exampleTB) Fatalf(f string, a ...any) { e.Errorf(f, a...); panic("Fatalf") }
func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// A test of your own charge activity: it must send the intent's token as the idempotency key.
// RequireRetrySafe fails the test, naming the path, if any way Temporal runs it again charges
// twice.
func ExampleRequireRetrySafe() {
	t := &exampleTB{} // in a test: func TestChargeIsRetrySafe(t *testing.T) {
	defer t.done()
	provider := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	chargeCard := func(ctx context.Context, amount int) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		return post(ctx, provider.URL, tok.String())
	}
	activitytest.RequireRetrySafe(t, activitytest.Check[int, charge]{
		Activity: chargeCard,
		Options:  activity.Options{DownstreamDeduplicates: true},
		Input:    100, Other: 999,
		Effects: provider.Effects, Faults: provider,
	})
	fmt.Println(t.Failed(), provider.Effects())
	// Output: false 7
}

// The recording downstream applies a repeated key once, like Stripe, and answers with the
// faults you ask for.
func ExampleDownstream() {
	t := &exampleTB{}
	defer t.done()
	d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	d.FailNext(activitytest.Fail500AfterEffect) // applied, but the caller hears 500
	_, err := post(context.Background(), d.URL, "tok-1")
	fmt.Println(err)
	c, _ := post(context.Background(), d.URL, "tok-1") // the retry gets the first effect
	fmt.Println(c.ID, d.Effects(), d.Requests("tok-1"))
	// Output:
	// downstream answered 500 Internal Server Error: {"error":{"type":"api_error","message":"injected: 500 after the effect"}}
	// eff_1 1 2
}

// RequireReceipt reads a receipt by token and checks what it records.
func ExampleRequireReceipt() {
	t := &exampleTB{}
	defer t.done()
	store := activitytest.NewStore(t, nil)
	k := keys.Key{Namespace: "default", Operation: "Charge", ID: "order-7"}
	fp, _ := keys.FingerprintOf(100)
	_, _ = activity.Do(context.Background(), store, activity.Call{Key: k, Fingerprint: fp}, func(context.Context) (charge, error) {
		return charge{ID: "ch_7"}, nil
	})
	r := activitytest.RequireReceipt(t, activitytest.NewOperator(t, store), k.Token(), activitytest.Want{Status: operator.StatusSucceeded, Result: charge{ID: "ch_7"}})
	fmt.Println(r.Attempts, t.Failed())
	// Output: 1 false
}

// A workflow test whose charge's worker dies after the charge, before it reports: the workflow's
// retry replays the receipt, and the provider charged once.
func ExampleWorkflowEnv_CrashBeforeReport() {
	t := &exampleTB{}
	defer t.done()
	store := activitytest.NewStore(t, nil)
	provider := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	env := activitytest.NewWorkflowEnv(t)
	env.RegisterWorkflow(chargeWorkflow)
	_ = activity.Register(env, store, "Charge", safeCharge(provider.URL), activity.Options{DownstreamDeduplicates: true})

	env.CrashBeforeReport("Charge")
	env.ExecuteWorkflow(chargeWorkflow, chargeRequest{Order: "order-1", Amount: 100})
	var c charge
	fmt.Println(env.GetWorkflowResult(&c), c.ID, env.Crashed("Charge"), provider.Effects())
	// Output: <nil> eff_1 1 1
}

// An activity test: the environment gives the activity an intent of the test's own, and a
// second environment with the same ID runs the same intent again, as Temporal's retry would.
func ExampleNewActivityEnv() {
	t := &exampleTB{}
	defer t.done()
	store := activitytest.NewStore(t, nil)
	provider := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	for range 2 {
		env := activitytest.NewActivityEnv(t, "Charge", "order-42")
		_ = activity.Register(env, store, "Charge", safeCharge(provider.URL), activity.Options{DownstreamDeduplicates: true})
		val, err := env.ExecuteActivity("Charge", chargeRequest{Order: "order-42", Amount: 100})
		var c charge
		if err == nil {
			err = val.Get(&c)
		}
		fmt.Println(c.ID, err)
	}
	fmt.Println(provider.Effects())
	// Output:
	// eff_1 <nil>
	// eff_1 <nil>
	// 1
}

// A DoInNewTx whose function failed rolled its receipt back with its writes: nothing is recorded,
// and the retry runs.
func ExampleRequireNoReceipt() {
	t := &exampleTB{}
	defer t.done()
	store := activitytest.NewStore(t, nil)
	k := keys.Key{Namespace: "default", Operation: "Reserve", ID: "order-8"}
	fp, _ := keys.FingerprintOf(3)
	_, err := activity.DoInNewTx(context.Background(), store, activity.Call{Key: k, Fingerprint: fp},
		func(context.Context, pgx.Tx) (int, error) { return 0, errors.New("stock table locked") })
	activitytest.RequireNoReceipt(t, activitytest.NewOperator(t, store), k.Token())
	fmt.Println(err != nil, t.Failed())
	// Output: true false
}

// A transactional activity that writes through the transaction it is given passes; see
// TestRequireRetrySafeTx for one that writes through a pool of its own and fails.
func ExampleRequireRetrySafeTx() {
	t := &exampleTB{}
	defer t.done()
	store := activitytest.NewStore(t, nil)
	ctx := context.Background()
	table := pgx.Identifier{store.Config().Schema, "reservations"}.Sanitize() // the store's schema is dropped after
	reserve := func(ctx context.Context, tx pgx.Tx, units int) (int64, error) {
		var id int64
		err := tx.QueryRow(ctx, "INSERT INTO "+table+" (units) VALUES ($1) RETURNING id", units).Scan(&id)
		return id, err
	}
	count := func() int {
		var n int
		_ = exampleDB(ctx).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
		return n
	}
	_, _ = exampleDB(ctx).Exec(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, units int NOT NULL)")

	activitytest.RequireRetrySafeTx(t, activitytest.CheckTx[int, int64]{Activity: reserve, Input: 3, Other: 5, Effects: count, Store: store})
	fmt.Println(t.Failed(), count())
	// Output: false 4
}

// The reset path needs a real Temporal server: NewDevServer starts the dev server (the CLI at
// TEMPORAL_CLI, or one the SDK downloads).
func ExampleRequireResetSafe() {
	var t *testing.T // in a test: func TestChargeSurvivesAReset(t *testing.T) {
	provider := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	activitytest.RequireResetSafe(t, activitytest.NewDevServer(t), activitytest.Check[chargeRequest, charge]{
		Activity: safeCharge(provider.URL), Options: activity.Options{DownstreamDeduplicates: true},
		Input: chargeRequest{Amount: 100}, Other: chargeRequest{Amount: 999}, Effects: provider.Effects,
	})
}

var (
	exampleOnce sync.Once
	examplePool *pgxpool.Pool
)

// exampleDB is a pool on the examples' database, for the tables of the user's own that an
// example writes.
func exampleDB(ctx context.Context) *pgxpool.Pool {
	exampleOnce.Do(func() {
		url := os.Getenv("TEST_DATABASE_URL")
		if url == "" {
			url = activitytest.DatabaseURLDefault
		}
		examplePool, _ = pgxpool.New(ctx, url)
	})
	return examplePool
}
