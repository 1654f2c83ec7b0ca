package activitytest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/keys"
)

type chargeRequest struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

type charge struct {
	ID string `json:"id"`
}

// client posts a charge to the recording downstream under key ("" sends no key).
func post(ctx context.Context, url, key string) (charge, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/charges", nil)
	if err != nil {
		return charge{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return charge{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return charge{}, fmt.Errorf("downstream answered %s", resp.Status)
	}
	var c charge
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

// The three ways to send a charge: under the intent's token, and two natural mistakes.
func safeCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, _ chargeRequest) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		return post(ctx, url, tok.String())
	}
}

func randomKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, _ chargeRequest) (charge, error) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return post(ctx, url, hex.EncodeToString(b[:])) // a fresh key per attempt
	}
}

func noKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, _ chargeRequest) (charge, error) { return post(ctx, url, "") }
}

// failures runs check against a recording testing.TB and returns what it reported.
func failures(t *testing.T, check func(tb testing.TB)) []string {
	t.Helper()
	tb := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(tb)
	}()
	<-done
	return tb.errors
}

// recorder is a testing.TB that records failures instead of failing: a check pointed at an
// unsafe activity must fail, and these tests read what it said.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func TestRequireRetrySafe(t *testing.T) {
	t.Parallel()
	req := chargeRequest{Order: "order-1", Amount: 100}
	other := chargeRequest{Order: "order-1", Amount: 999}

	t.Run("PassesAnActivityThatSendsItsToken", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		activitytest.RequireRetrySafe(t, activitytest.Check[chargeRequest, charge]{
			Activity: safeCharge(d.URL), Options: activity.Options{DownstreamDeduplicates: true},
			Input: req, Other: other, Effects: d.Effects,
		})
	})

	// A downstream that does not deduplicate, declared as such: a takeover after a possible
	// effect fails OutcomeUnknown instead of charging again. Safe.
	t.Run("PassesANonDeduplicatingDownstreamDeclaredAsSuch", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, nil)
		activitytest.RequireRetrySafe(t, activitytest.Check[chargeRequest, charge]{
			Activity: safeCharge(d.URL), Input: req, Other: other, Effects: d.Effects,
		})
	})

	unsafe := []struct {
		name     string
		activity func(url string) func(context.Context, chargeRequest) (charge, error)
		dedup    bool // the downstream deduplicates
	}{
		{"RandomKeyPerAttempt", randomKeyCharge, true},
		{"IgnoresTheToken", noKeyCharge, true},
		{"ClaimsADeduplicatingDownstream", safeCharge, false},
	}
	for _, u := range unsafe {
		t.Run("Fails"+u.name, func(t *testing.T) {
			t.Parallel()
			d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: u.dedup})
			store := activitytest.NewStore(t, nil)
			got := failures(t, func(tb testing.TB) {
				activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
					Activity: u.activity(d.URL), Options: activity.Options{DownstreamDeduplicates: true},
					Input: req, Other: other, Effects: d.Effects, Store: store,
				})
			})
			all := strings.Join(got, "\n")
			require.Contains(t, all, activitytest.PathCrashAfterEffect+": 2 effects for one intent, want 1", "the check passed an unsafe activity")
			require.Contains(t, all, activitytest.PathTimeoutWhileRuns+": 2 effects for one intent, want 1")
			require.NotContains(t, all, activitytest.PathCrashBeforeReport, "the receipt's replay should cover a crash before report")
			t.Logf("what the check said:\n%s", all)
		})
	}

	t.Run("RefusesAnOtherThatIsNotOther", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, nil)
		got := failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
				Activity: safeCharge(d.URL), Input: req, Other: req, Effects: d.Effects, Store: activitytest.NewStore(t, nil),
			})
		})
		require.Len(t, got, 1)
		require.Contains(t, got[0], "Check.Other fingerprints like Check.Input")
	})

	t.Run("RefusesEffectsThatCountNothing", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, nil)
		got := failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
				Activity: safeCharge(d.URL), Input: req, Other: other, Effects: func() int { return 0 },
				Store: activitytest.NewStore(t, nil),
			})
		})
		require.Len(t, got, 1)
		require.Contains(t, got[0], "0 effects, want 1: Check.Effects does not count this activity's effect")
	})
}

func TestDownstreamFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	d.FailNext(activitytest.Fail500BeforeEffect, activitytest.Fail500AfterEffect, activitytest.DropAfterEffect)
	_, err := post(ctx, d.URL, "k1")
	require.ErrorContains(t, err, "500")
	require.Equal(t, 0, d.Effects(), "a 500 before the effect applied it")
	_, err = post(ctx, d.URL, "k1")
	require.ErrorContains(t, err, "500")
	require.Equal(t, 1, d.Effects(), "a 500 after the effect did not apply it")
	_, err = post(ctx, d.URL, "k2")
	require.Error(t, err, "a dropped connection answered")
	require.Equal(t, 2, d.Effects())
	first, err := post(ctx, d.URL, "k1")
	require.NoError(t, err)
	again, err := post(ctx, d.URL, "k1")
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Equal(t, 2, d.Effects(), "a repeated key was applied again")
	require.Equal(t, 1, d.EffectsFor("k1"))
	require.Equal(t, 4, d.Requests("k1"))
	require.Equal(t, []string{"k1", "k2"}, d.Keys())

	plain := activitytest.NewDownstream(t, nil)
	_, _ = post(ctx, plain.URL, "k")
	_, _ = post(ctx, plain.URL, "k")
	require.Equal(t, 2, plain.Effects(), "a downstream that does not deduplicate applied a repeat once")
}

func TestRequireReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := activitytest.NewStore(t, nil)
	k := keys.Key{Namespace: "default", Operation: "Charge", ID: "order-1"}
	fp, err := keys.FingerprintOf(1)
	require.NoError(t, err)
	activitytest.RequireNoReceipt(t, s, k.Token())
	_, err = activity.Do(ctx, s, activity.Call{Key: k, Fingerprint: fp}, func(context.Context) (charge, error) {
		return charge{ID: "ch_1"}, nil
	})
	require.NoError(t, err)
	activitytest.RequireReceipt(t, s, k.Token(), activitytest.Want{Status: activity.StatusSucceeded, Result: charge{ID: "ch_1"}, Attempts: 1})

	got := failures(t, func(tb testing.TB) {
		activitytest.RequireReceipt(tb, s, k.Token(), activitytest.Want{Status: activity.StatusFailed, Result: charge{ID: "ch_2"}})
		activitytest.RequireNoReceipt(tb, s, k.Token())
	})
	require.Len(t, got, 3)
	require.Contains(t, got[0], "is succeeded, want failed")
	require.Contains(t, got[1], `records result {"id":"ch_1"}, want {"id":"ch_2"}`)
	require.Contains(t, got[2], "want no receipt")
}

func TestNewStoreWithoutADatabase(t *testing.T) {
	t.Setenv("TEST_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
	got := failures(t, func(tb testing.TB) { activitytest.NewStore(tb, nil) })
	require.Len(t, got, 1)
	require.Contains(t, got[0], "does not answer")
	require.Contains(t, got[0], "TEST_DATABASE_URL")
}

func chargeWorkflow(ctx workflow.Context, req chargeRequest) (charge, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 3},
	})
	var c charge
	err := workflow.ExecuteActivity(ctx, "Charge", req).Get(ctx, &c)
	return c, err
}

func TestWorkflowEnvCrashBeforeReport(t *testing.T) {
	t.Parallel()
	store := activitytest.NewStore(t, nil)
	d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	run := func(t *testing.T, crash bool) (charge, *activitytest.WorkflowEnv) {
		env := activitytest.NewWorkflowEnv(t)
		env.RegisterWorkflow(chargeWorkflow)
		require.NoError(t, activity.Register(env, store, "Charge", safeCharge(d.URL), activity.Options{DownstreamDeduplicates: true}))
		if crash {
			env.CrashBeforeReport("Charge")
		}
		env.ExecuteWorkflow(chargeWorkflow, chargeRequest{Order: "order-1", Amount: 100})
		require.NoError(t, env.GetWorkflowError())
		var c charge
		require.NoError(t, env.GetWorkflowResult(&c))
		return c, env
	}
	got, env := run(t, true)
	require.Equal(t, 1, env.Crashed("Charge"), "the armed crash did not happen")
	require.Equal(t, 1, d.Effects(), "the retry after a crash before report charged again")
	require.Equal(t, "eff_1", got.ID)

	// Another test's workflow (another env) derives other keys: no replay of the first one's
	// charge, no payload mismatch.
	other, _ := run(t, false)
	require.Equal(t, "eff_2", other.ID)
	require.Equal(t, 2, d.Effects())
}

func TestNewActivityEnv(t *testing.T) {
	t.Parallel()
	store := activitytest.NewStore(t, nil)
	d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
	run := func(id string) charge {
		env := activitytest.NewActivityEnv(t, "Charge", id)
		require.NoError(t, activity.Register(env, store, "Charge", safeCharge(d.URL), activity.Options{DownstreamDeduplicates: true}))
		val, err := env.ExecuteActivity("Charge", chargeRequest{Order: "order-1", Amount: 100})
		require.NoError(t, err)
		var c charge
		require.NoError(t, val.Get(&c))
		return c
	}
	first, second := run(""), run("") // unique intents: two charges
	require.NotEqual(t, first, second)
	again, repeat := run("order-1"), run("order-1") // one intent run twice: one charge
	require.Equal(t, again, repeat)
	require.Equal(t, 3, d.Effects())
}

// runIDKeyCharge builds its idempotency key from the run and activity IDs: stable across the
// retries of one run, and new after a reset.
func runIDKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, _ chargeRequest) (charge, error) {
		info := sdkactivity.GetInfo(ctx)
		return post(ctx, url, info.WorkflowExecution.RunID+"/"+info.ActivityID)
	}
}

func TestRequireResetSafe(t *testing.T) {
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	t.Setenv("TEMPORAL_CLI", cli)
	c := activitytest.NewDevServer(t)
	req, other := chargeRequest{Order: "order-1", Amount: 100}, chargeRequest{Order: "order-1", Amount: 999}

	t.Run("PassesAnActivityThatSendsItsToken", func(t *testing.T) {
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		activitytest.RequireResetSafe(t, c, activitytest.Check[chargeRequest, charge]{
			Activity: safeCharge(d.URL), Options: activity.Options{DownstreamDeduplicates: true},
			Input: req, Other: other, Effects: d.Effects,
		})
	})

	// The key survives every retry in one run, so RequireRetrySafe passes it; a reset is a new
	// run, and charges again.
	t.Run("FailsAKeyMadeOfTheRunID", func(t *testing.T) {
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		check := activitytest.Check[chargeRequest, charge]{
			Activity: runIDKeyCharge(d.URL), Options: activity.Options{DownstreamDeduplicates: true},
			Input: req, Other: other, Effects: d.Effects, Store: activitytest.NewStore(t, nil),
		}
		// In the SDK's environments every intent has the same run and activity IDs, so the key
		// is shared by the check's intents: RequireRetrySafe sees a later intent with no effect.
		retry := strings.Join(failures(t, func(tb testing.TB) { activitytest.RequireRetrySafe(tb, check) }), "\n")
		require.Contains(t, retry, activitytest.PathCrashAfterEffect+": 0 effects for this intent, want 1")
		got := failures(t, func(tb testing.TB) { activitytest.RequireResetSafe(tb, c, check) })
		require.Len(t, got, 1)
		require.Contains(t, got[0], activitytest.PathReset+": 2 effects for one intent, want 1")
	})
}

func TestRequireRetrySafeTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = activitytest.DatabaseURLDefault
	}
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "activitytest_orders_" + hex.EncodeToString(b[:])
	_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, amount int NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+table) })
	rows := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	req, other := chargeRequest{Order: "order-1", Amount: 100}, chargeRequest{Order: "order-1", Amount: 999}
	insert := func(ctx context.Context, db interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, in chargeRequest) (int64, error) {
		var id int64
		return id, db.QueryRow(ctx, "INSERT INTO "+table+" (amount) VALUES ($1) RETURNING id", in.Amount).Scan(&id)
	}

	t.Run("PassesWritesThroughTheTransaction", func(t *testing.T) {
		activitytest.RequireRetrySafeTx(t, activitytest.CheckTx[chargeRequest, int64]{
			Activity: func(ctx context.Context, tx pgx.Tx, in chargeRequest) (int64, error) { return insert(ctx, tx, in) },
			Input:    req, Other: other, Effects: rows,
		})
	})

	t.Run("FailsWritesOutsideTheTransaction", func(t *testing.T) {
		store := activitytest.NewStore(t, nil)
		got := strings.Join(failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafeTx(tb, activitytest.CheckTx[chargeRequest, int64]{
				Activity: func(ctx context.Context, _ pgx.Tx, in chargeRequest) (int64, error) { return insert(ctx, pool, in) },
				Input:    req, Other: other, Effects: rows, Store: store,
			})
		}), "\n")
		require.Contains(t, got, activitytest.PathRolledBack+": 1 effects left by an attempt whose transaction rolled back, want 0")
		t.Logf("what the check said:\n%s", got)
	})
}
