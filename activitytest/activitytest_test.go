package activitytest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

type chargeRequest struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

type charge struct {
	ID string `json:"id"`
}

// post posts a charge to the recording downstream under key ("" sends no key), with net/http's
// default client.
func post(ctx context.Context, url, key string) (charge, error) {
	return postWith(ctx, http.DefaultClient, url+"/v1/charges", key, nil)
}

// client sends each request once, as downstream.Transport does: net/http alone sends a request
// that carries an Idempotency-Key again when a reused connection breaks after it was written.
var client = &http.Client{Transport: &downstream.Transport{}}

// postBody posts body as JSON to url under key with client, and fails with the downstream's
// answer unless it is 200.
func postBody(ctx context.Context, url, key string, body any) (charge, error) {
	return postWith(ctx, client, url, key, body)
}

func postWith(ctx context.Context, client *http.Client, url, key string, body any) (charge, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return charge{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return charge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return charge{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return charge{}, fmt.Errorf("downstream answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var c charge
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

// The ways to send a charge: under the intent's token, and the mistakes users make.
func safeCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		return postBody(ctx, url+"/v1/charges", tok.String(), in)
	}
}

// defaultClientCharge sends its token with net/http's default client, which sends a request
// again by itself when a reused connection breaks after it was written.
func defaultClientCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		return postWith(ctx, http.DefaultClient, url+"/v1/charges", tok.String(), in)
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

// tokenAndAttemptCharge adds the attempt to the token: one key per attempt.
func tokenAndAttemptCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		return postBody(ctx, url+"/v1/charges", fmt.Sprintf("%s/%d", tok, sdkactivity.GetInfo(ctx).Attempt), in)
	}
}

// taskTokenKeyCharge remembers a key per task token, in memory: the same key for the retries of
// one attempt, and a new one for each of Temporal's attempts.
func taskTokenKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return rememberedBy(url, func(ctx context.Context) string { return string(sdkactivity.GetInfo(ctx).TaskToken) })
}

// rememberedKeyCharge remembers a random key per intent's token, in memory: the same key for
// every attempt in this process, and a new one on a worker that starts after a crash.
func rememberedKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return rememberedBy(url, func(ctx context.Context) string { tok, _ := keys.TokenFrom(ctx); return tok.String() })
}

// rememberedBy sends a random key that it remembers, in memory, under what by returns.
func rememberedBy(url string, by func(context.Context) string) func(context.Context, chargeRequest) (charge, error) {
	var mu sync.Mutex
	remembered := map[string]string{}
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		mu.Lock()
		k := by(ctx)
		if remembered[k] == "" {
			var b [8]byte
			_, _ = rand.Read(b[:])
			remembered[k] = hex.EncodeToString(b[:])
		}
		key := remembered[k]
		mu.Unlock()
		return postBody(ctx, url+"/v1/charges", key, in)
	}
}

// orderKeyCharge sends the order's ID as its key: every intent of the order (a charge, its
// retry after a reset, a second charge) shares it.
func orderKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		return postBody(ctx, url+"/v1/charges", in.Order, in)
	}
}

// finalFailureCharge sends its token but makes every failure final: a lost answer becomes a
// failed charge.
func finalFailureCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		c, err := safeCharge(url)(ctx, in)
		if err != nil {
			return c, temporal.NewNonRetryableApplicationError(err.Error(), "ChargeFailed", err)
		}
		return c, nil
	}
}

// runIDKeyCharge builds its idempotency key from the run and activity IDs: stable across the
// retries of one run, and new after a reset.
func runIDKeyCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, _ chargeRequest) (charge, error) {
		info := sdkactivity.GetInfo(ctx)
		return post(ctx, url, info.WorkflowExecution.RunID+"/"+info.ActivityID)
	}
}

// notAppliedCharge sends its token but marks every failed request NotApplied, a 500 after the
// provider charged too.
func notAppliedCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		c, err := safeCharge(url)(ctx, in)
		if err != nil {
			return c, activity.NotApplied(err)
		}
		return c, nil
	}
}

// stampedCharge sends its token with a request that changes between attempts: the time it was
// built, in the description.
func stampedCharge(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		body := map[string]any{"order": in.Order, "amount": in.Amount, "description": "charged at " + time.Now().Format(time.RFC3339Nano)}
		return postBody(ctx, url+"/v1/charges", tok.String(), body)
	}
}

// twoChargesPerCall charges twice per call, under two keys.
func twoChargesPerCall(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(ctx context.Context, in chargeRequest) (charge, error) {
		tok, _ := keys.TokenFrom(ctx)
		if _, err := postBody(ctx, url+"/v1/charges", tok.String()+"/deposit", in); err != nil {
			return charge{}, err
		}
		return postBody(ctx, url+"/v1/charges", tok.String()+"/balance", in)
	}
}

// The items of a batch charge, and the path each is sent to.
var batchItems = []string{"a", "b", "c"}

func itemPath(item string) string { return "/v1/transfers/" + item }

// batchCharge pays each item of the order under the item's own token (ForEach), declaring
// the downstream deduplicating when declared; with notApplied, it marks every failed transfer
// NotApplied.
func batchCharge(store *activity.Store, declared, notApplied bool) func(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(url string) func(context.Context, chargeRequest) (charge, error) {
		return func(ctx context.Context, in chargeRequest) (charge, error) {
			results, err := activity.ForEach(ctx, store, batchItems, activity.Items[string]{
				ID: func(item string) string { return item }, Operation: "Transfer",
				Options: activity.Options{DownstreamDeduplicates: declared},
			}, func(ctx context.Context, item string) (charge, error) {
				tok, _ := keys.TokenFrom(ctx)
				c, err := postBody(ctx, url+itemPath(item), tok.String(), in)
				if err != nil && notApplied {
					return c, activity.NotApplied(err)
				}
				return c, err
			})
			if err != nil {
				return charge{}, err
			}
			return charge{ID: results[0].Out.ID}, nil
		}
	}
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

// verdictName names the subtest of a case: Passes… for a safe activity, Fails… for another.
func verdictName(name string, want []string) string {
	if want == nil {
		return "Passes" + name
	}
	return "Fails" + name
}

// requireVerdict fails t unless a check's failures are none when want is nil, and otherwise
// say all of want and none of not.
func requireVerdict(t *testing.T, failures []string, want, not []string) {
	t.Helper()
	got := strings.Join(failures, "\n")
	if want == nil {
		require.Empty(t, got, "the check failed a safe activity")
		return
	}
	require.NotEmpty(t, got, "the check passed an unsafe activity")
	for _, w := range want {
		require.Contains(t, got, w)
	}
	for _, n := range not {
		require.NotContains(t, got, n)
	}
	t.Logf("what the check said:\n%s", got)
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

// harnessCase is an activity, safe or not, as a user might write it, and the downstream it
// runs against.
type harnessCase struct {
	name     string
	activity func(url string) func(context.Context, chargeRequest) (charge, error)
	batch    func(store *activity.Store, declared bool) func(url string) func(context.Context, chargeRequest) (charge, error)
	dedup    bool     // the downstream deduplicates
	declared bool     // the activity declares it does (Options.DownstreamDeduplicates)
	want     []string // nil: the check passes it; else what each failure must say, all of it
}

// harnessCases are the activities every activitytest check is tried with: the safe ones must
// pass, and each unsafe one must fail with a message that names what is wrong with it.
var harnessCases = []harnessCase{
	{name: "SendsItsToken", activity: safeCharge, dedup: true, declared: true},
	// A downstream that does not deduplicate, declared as such: a takeover after a possible
	// effect fails OutcomeUnknown instead of charging again.
	{name: "NonDeduplicatingDownstreamDeclaredAsSuch", activity: safeCharge},
	{name: "BatchSendsEachItemsToken", batch: batchOf(false), dedup: true, declared: true},

	{name: "RandomKeyPerAttempt", activity: randomKeyCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1", activitytest.PathTimeoutWhileRuns + ": 2 effects for one intent, want 1", "Send the token"}},
	{name: "IgnoresTheToken", activity: noKeyCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1"}},
	{name: "ClaimsADeduplicatingDownstream", activity: safeCharge, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1", "set Options.DownstreamDeduplicates only for a downstream that deduplicates"}},
	// Issue 38's first three: each passed the harness that ran every attempt alike.
	{name: "KeyOfTheTokenAndTheAttempt", activity: tokenAndAttemptCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1", "not the attempt, the task token"}},
	{name: "KeyPerTaskTokenInMemory", activity: taskTokenKeyCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1"}},
	{name: "KeyRememberedInMemory", activity: rememberedKeyCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1"}},
	{name: "KeyOfTheOrderID", activity: orderKeyCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": 0 effects for this intent, want 1", activitytest.PathFailAfterEffect + " (500 after the effect): 0 effects, want 1: either the downstream took the request for an earlier intent's"}},
	{name: "EveryFailureFinal", activity: finalFailureCharge, dedup: true, declared: true,
		want: []string{activitytest.PathFailAfterEffect + " (500 after the effect): the intent ended in a failure, though its effect happened"}},
	{name: "KeyOfTheRunID", activity: runIDKeyCharge, dedup: true, declared: true,
		want: []string{activitytest.PathNewRun + ": 2 effects for one intent, want 1"}},
	{name: "RequestChangesBetweenAttempts", activity: stampedCharge, dedup: true, declared: true,
		want: []string{activitytest.PathCrashAfterEffect + ": the attempt that took over failed", "idempotency_error", "the activity's request changes between attempts",
			activitytest.PathFailAfterEffect + " (500 after the effect): still failing after 6 attempts"}},
	{name: "EveryFailureNotApplied", activity: notAppliedCharge,
		want: []string{activitytest.PathFailAfterEffect + " (500 after the effect): 2 effects for one intent, want 1", "mark an error activity.NotApplied only when the downstream says it did nothing"}},
	// Found by the harness itself: the safe activity, sending with net/http's default client.
	{name: "DefaultClientOnANonDeduplicatingDownstream", activity: defaultClientCharge,
		want: []string{activitytest.PathFailAfterEffect + " (connection dropped after the effect): 2 effects for one intent in one attempt, want 1", "downstream.Transport"}},
	{name: "BatchItemFailuresNotApplied", batch: batchOf(true),
		want: []string{activitytest.PathFailAfterEffect + " (500 after the effect): 2 effects for one intent, want 1"}},
	{name: "TwoEffectsPerCall", activity: twoChargesPerCall, dedup: true, declared: true,
		want: []string{activitytest.PathCrashBeforeReport + ": one call of the activity had 2 effects, want 1"}},
}

// batchOf returns batchCharge, marking every failed transfer NotApplied when notApplied.
func batchOf(notApplied bool) func(*activity.Store, bool) func(string) func(context.Context, chargeRequest) (charge, error) {
	return func(store *activity.Store, declared bool) func(string) func(context.Context, chargeRequest) (charge, error) {
		return batchCharge(store, declared, notApplied)
	}
}

// check returns the Check of c against a downstream of its own.
func (c harnessCase) check(t *testing.T) activitytest.Check[chargeRequest, charge] {
	d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: c.dedup})
	store := activitytest.NewStore(t, nil)
	chk := activitytest.Check[chargeRequest, charge]{
		Options: activity.Options{DownstreamDeduplicates: c.declared},
		Input:   chargeRequest{Order: "order-1", Amount: 100}, Other: chargeRequest{Order: "order-1", Amount: 999},
		Effects: d.Effects, Faults: d, Store: store,
	}
	if c.batch != nil {
		// Counted per item: each item of an intent paid once.
		chk.Activity, chk.Options = c.batch(store, c.declared)(d.URL), activity.Options{Batch: true}
		chk.Effects = nil
		chk.Items = func(chargeRequest) []string { return batchItems }
		chk.ItemEffects = func() map[string]int { return d.EffectsPer(itemPath("")) }
		return chk
	}
	chk.Activity = c.activity(d.URL)
	return chk
}

func TestRequireRetrySafe(t *testing.T) {
	t.Parallel()
	req := chargeRequest{Order: "order-1", Amount: 100}
	other := chargeRequest{Order: "order-1", Amount: 999}

	for _, c := range harnessCases {
		t.Run(verdictName(c.name, c.want), func(t *testing.T) {
			t.Parallel()
			check := c.check(t)
			requireVerdict(t, failures(t, func(tb testing.TB) { activitytest.RequireRetrySafe(tb, check) }), c.want, nil)
		})
	}

	// A fake kept in memory (not behind a FaultProxy) starts empty in the worker process that
	// takes over: the check says so rather than blaming the activity alone.
	t.Run("ExplainsAFakeKeptInMemory", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		charged := map[keys.Token]bool{} // a deduplicating fake, in this process's memory
		charges := 0
		d := activitytest.NewDownstream(t, nil) // only for its faults, never called
		got := strings.Join(failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
				Activity: func(ctx context.Context, _ chargeRequest) (charge, error) {
					tok, _ := keys.TokenFrom(ctx)
					mu.Lock()
					defer mu.Unlock()
					if !charged[tok] {
						charged[tok] = true
						charges++
					}
					return charge{ID: string(tok)}, nil
				},
				Options: activity.Options{DownstreamDeduplicates: true},
				Input:   req, Other: other, Faults: d, Store: activitytest.NewStore(t, nil),
				Effects: func() int { mu.Lock(); defer mu.Unlock(); return charges },
			})
		}), "\n")
		require.Contains(t, got, activitytest.PathCrashAfterEffect+": 2 effects for one intent, want 1, 1 of them counted only in the worker process that took over")
		require.Contains(t, got, "FaultProxy")
	})

	t.Run("RefusesACheckWithoutFaults", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, nil)
		got := failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
				Activity: safeCharge(d.URL), Input: req, Other: other, Effects: d.Effects,
			})
		})
		require.Len(t, got, 1)
		require.Contains(t, got[0], "needs Check.Faults")
	})

	t.Run("RefusesAnOtherThatIsNotOther", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, nil)
		got := failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
				Activity: safeCharge(d.URL), Input: req, Other: req, Effects: d.Effects, Faults: d, Store: activitytest.NewStore(t, nil),
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
				Faults: d, Store: activitytest.NewStore(t, nil),
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
	_, err := postBody(ctx, d.URL+"/v1/charges", "k1", nil)
	require.ErrorContains(t, err, "500")
	require.Equal(t, 0, d.Effects(), "a 500 before the effect applied it")
	_, err = postBody(ctx, d.URL+"/v1/charges", "k1", nil)
	require.ErrorContains(t, err, "500")
	require.Equal(t, 1, d.Effects(), "a 500 after the effect did not apply it")
	_, err = postBody(ctx, d.URL+"/v1/charges", "k2", nil)
	require.Error(t, err, "a dropped connection answered")
	require.Equal(t, 2, d.Effects())
	first, err := postBody(ctx, d.URL+"/v1/charges", "k1", nil)
	require.NoError(t, err)
	again, err := postBody(ctx, d.URL+"/v1/charges", "k1", nil)
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

// A deduplicating Downstream compares a repeated key's request with the first, as Stripe and
// fakepay do: the same values (in any order) replay, other values are refused with 400
// idempotency_error, and a repeat while the first is in flight gets 409.
func TestDownstreamComparesTheRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true, SlowFor: time.Second})
	first, err := postBody(ctx, d.URL+"/v1/charges", "k", map[string]any{"amount": 100, "order": "o-1"})
	require.NoError(t, err)
	again, err := postBody(ctx, d.URL+"/v1/charges", "k", json.RawMessage(`{"order":"o-1","amount":100}`))
	require.NoError(t, err, "the same values in another order are the same request")
	require.Equal(t, first, again)
	_, err = postBody(ctx, d.URL+"/v1/charges", "k", map[string]any{"amount": 400, "order": "o-1"})
	require.ErrorContains(t, err, "400 Bad Request")
	require.ErrorContains(t, err, "idempotency_error")
	_, err = postBody(ctx, d.URL+"/v1/refunds", "k", map[string]any{"amount": 100, "order": "o-1"})
	require.ErrorContains(t, err, "idempotency_error", "another path under the same key")
	require.Equal(t, 1, d.Effects())

	d.FailNext(activitytest.Slow)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = postBody(ctx, d.URL+"/v1/charges", "slow", nil) })
	require.Eventually(t, func() bool { return d.Requests("slow") == 1 }, 5*time.Second, time.Millisecond)
	_, err = postBody(ctx, d.URL+"/v1/charges", "slow", nil)
	require.ErrorContains(t, err, "409 Conflict", "a repeat while the first is in flight")
	wg.Wait()
	require.Equal(t, 2, d.Effects())

	send := func(path, contentType, body string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		req.Header.Set("Idempotency-Key", path)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("downstream answered %s", resp.Status)
		}
		return nil
	}
	raw := func(body string) error { return send("/v1/raw", "", body) } // JSON, not labelled so
	form := func(body string) error { return send("/v1/forms", "application/x-www-form-urlencoded", body) }
	require.NoError(t, raw(`{"a":1,"b":2}`))
	require.NoError(t, raw(`{"b":2,"a":1}`), "a JSON body is compared by value whatever its content type")
	require.NoError(t, form("amount=100&currency=eur"))
	require.NoError(t, form("currency=eur&amount=100"), "the same form values in another order are the same request")
	require.ErrorContains(t, form("currency=eur&amount=400"), "400 Bad Request")
	require.Equal(t, 4, d.Effects())

	lax := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true, AcceptChangedRequests: true})
	_, err = postBody(ctx, lax.URL+"/v1/charges", "k", map[string]any{"amount": 100})
	require.NoError(t, err)
	_, err = postBody(ctx, lax.URL+"/v1/charges", "k", map[string]any{"amount": 400})
	require.NoError(t, err, "AcceptChangedRequests replays whatever the repeat asks")
	require.Equal(t, 1, lax.Effects())
}

// A FaultProxy in front of a downstream of one's own fails the requests asked for, and passes
// the others through.
func TestFaultProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := activitytest.NewDownstream(t, nil)
	p := activitytest.NewFaultProxy(t, d.URL)
	p.FailNext(activitytest.Fail500BeforeEffect, activitytest.Fail500AfterEffect, activitytest.DropAfterEffect)
	_, err := postBody(ctx, p.URL+"/v1/charges", "k1", nil)
	require.ErrorContains(t, err, "500")
	require.Equal(t, 0, d.Effects(), "a 500 before the effect reached the downstream")
	_, err = postBody(ctx, p.URL+"/v1/charges", "k2", nil)
	require.ErrorContains(t, err, "500")
	require.Equal(t, 1, d.Effects(), "a 500 after the effect did not reach the downstream")
	_, err = postBody(ctx, p.URL+"/v1/charges", "k3", nil)
	require.Error(t, err, "a dropped connection answered")
	require.Equal(t, 2, d.Effects())
	c, err := postBody(ctx, p.URL+"/v1/charges", "k4", nil)
	require.NoError(t, err)
	require.Equal(t, "eff_3", c.ID)
	require.Equal(t, 1, d.EffectsOn("/v1/charges")-2)
}

func TestRequireReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := activitytest.NewStore(t, nil)
	op := activitytest.NewOperator(t, s)
	k := keys.Key{Namespace: "default", Operation: "Charge", ID: "order-1"}
	fp, err := keys.FingerprintOf(1)
	require.NoError(t, err)
	activitytest.RequireNoReceipt(t, op, k.Token())
	_, err = activity.Do(ctx, s, activity.Call{Key: k, Fingerprint: fp}, func(context.Context) (charge, error) {
		return charge{ID: "ch_1"}, nil
	})
	require.NoError(t, err)
	activitytest.RequireReceipt(t, op, k.Token(), activitytest.Want{Status: operator.StatusSucceeded, Result: charge{ID: "ch_1"}, Attempts: 1})

	got := failures(t, func(tb testing.TB) {
		activitytest.RequireReceipt(tb, op, k.Token(), activitytest.Want{Status: operator.StatusFailed, Result: charge{ID: "ch_2"}})
		activitytest.RequireNoReceipt(tb, op, k.Token())
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

	t.Run("PassesABatch", func(t *testing.T) {
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		store := activitytest.NewStore(t, nil)
		activitytest.RequireResetSafe(t, c, activitytest.Check[chargeRequest, charge]{
			Activity: batchCharge(store, true, false)(d.URL), Options: activity.Options{Batch: true},
			Input: req, Other: other, Store: store,
			Items:       func(chargeRequest) []string { return batchItems },
			ItemEffects: func() map[string]int { return d.EffectsPer(itemPath("")) },
		})
	})

	// A batch whose pass is named by the run: the reset run finds no item receipt, and pays
	// every item again.
	t.Run("FailsABatchNamedByTheRun", func(t *testing.T) {
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		store := activitytest.NewStore(t, nil)
		byRun := batchShape{operation: func(ctx context.Context) string {
			return "Transfer-" + sdkactivity.GetInfo(ctx).WorkflowExecution.RunID
		}}
		got := failures(t, func(tb testing.TB) {
			activitytest.RequireResetSafe(tb, c, activitytest.Check[chargeRequest, charge]{
				Activity: shapedBatch(store, byRun)(d.URL), Options: activity.Options{Batch: true},
				Input: req, Other: other, Store: store,
				Items:       func(chargeRequest) []string { return batchItems },
				ItemEffects: func() map[string]int { return d.EffectsPer(itemPath("")) },
			})
		})
		require.Len(t, got, 1)
		require.Contains(t, got[0], activitytest.PathReset+": 2 effects for one intent, want 1")
		require.Contains(t, got[0], `item "b" had 2`)
	})

	// The key survives every retry in one run; a reset is a new run, and charges again.
	t.Run("FailsAKeyMadeOfTheRunID", func(t *testing.T) {
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		check := activitytest.Check[chargeRequest, charge]{
			Activity: runIDKeyCharge(d.URL), Options: activity.Options{DownstreamDeduplicates: true},
			Input: req, Other: other, Effects: d.Effects, Faults: d, Store: activitytest.NewStore(t, nil),
		}
		// RequireRetrySafe runs an attempt in a new run too, and sees the second charge.
		retry := strings.Join(failures(t, func(tb testing.TB) { activitytest.RequireRetrySafe(tb, check) }), "\n")
		require.Contains(t, retry, activitytest.PathNewRun+": 2 effects for one intent, want 1")
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

	// A transactional activity that also calls a deduplicating downstream, under its token:
	// a lost answer rolls its writes back, and the retry gets the downstream's first answer.
	t.Run("PassesADownstreamCallInsideTheTransaction", func(t *testing.T) {
		d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
		activitytest.RequireRetrySafeTx(t, activitytest.CheckTx[chargeRequest, int64]{
			Activity: func(ctx context.Context, tx pgx.Tx, in chargeRequest) (int64, error) {
				if _, err := safeCharge(d.URL)(ctx, in); err != nil {
					return 0, err
				}
				return insert(ctx, tx, in)
			},
			Options: activity.Options{DownstreamDeduplicates: true},
			Input:   req, Other: other, Effects: rows, Faults: d,
		})
		require.Equal(t, 0, d.EffectsFor(""), "a request went out without the token")
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
