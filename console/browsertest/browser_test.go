package browsertest

import (
	"context"
	"encoding/base64"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/console"
	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

type chargeResult struct {
	ChargeID string `json:"charge_id"`
}

// chromium is the browser's binary: CHROMIUM, or Debian's.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: install Debian's (apt-get install -y chromium), or set CHROMIUM to its binary")
	return ""
}

// A real worker process charges through a provider that does not deduplicate and is killed
// with SIGKILL before its receipt; the next worker's attempt finds nobody knows whether the
// charge happened. An operator resolves it in a real browser; the audit line shows; the
// workflow's next run replays the resolution, and the provider charged once.
func TestResolveInTheBrowser(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	codecs := []converter.PayloadCodec{receipttest.Rot13Codec{}}
	store, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema, Codecs: codecs})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = pgtest.Pool(t).Exec(ctx, "CREATE TABLE "+providerCharges(schema)+" (id bigserial PRIMARY KEY, amount int NOT NULL)")
	require.NoError(t, err)
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema, Codecs: codecs})
	require.NoError(t, err)
	out, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: schema})
	require.NoError(t, err)
	alice := console.User{Name: "alice@example.com", Password: "alice-operator-pw", Role: console.RoleOperator}
	h, err := console.New(console.Config{Operator: op, Outbox: out, Inbox: pgtest.Pool(t), Users: []console.User{alice}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	cli, err := filepath.Abs("../../bin/temporal")
	require.NoError(t, err)
	temporalSrv, err := devserver.Start(ctx, devserver.Options{CLI: cli})
	require.NoError(t, err, "the Temporal CLI is built by `make bin/temporal` (make test does)")
	defer temporalSrv.Stop()
	spec := workerSpec{DatabaseURL: pgtest.URL(), Schema: schema, Temporal: temporalSrv.Addr(), Queue: "browsertest-" + schema}
	charges := func() int {
		var n int
		require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM "+providerCharges(schema)).Scan(&n))
		return n
	}

	// The first worker charges and is killed before it records anything.
	spec.Freeze = true
	first, err := startWorker(spec)
	require.NoError(t, err)
	defer first.Kill()
	run, err := temporalSrv.Client().ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "order-7", TaskQueue: spec.Queue,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 1}}, "Order", 4200)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return charges() == 1 }, time.Minute, 20*time.Millisecond, "the first worker never charged")
	require.NoError(t, first.Signal(syscall.SIGKILL))
	require.Error(t, first.Wait(), "the first worker was not killed")

	// The next worker's attempt finds the receipt of an attempt that died after its call.
	spec.Freeze = false
	second, err := startWorker(spec)
	require.NoError(t, err)
	defer second.Stop()
	var tok string
	require.Eventually(t, func() bool {
		page, err := op.Receipts(ctx, operator.Filter{State: operator.FilterUnresolved, WorkflowID: "order-7"})
		require.NoError(t, err)
		if len(page.Receipts) == 1 {
			tok = string(page.Receipts[0].Token)
		}
		return tok != ""
	}, time.Minute, 50*time.Millisecond, "the charge's receipt never waited for a person")

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromium(t)), chromedp.Headless, chromedp.NoSandbox,
		chromedp.NoFirstRun, chromedp.DisableGPU, chromedp.WindowSize(1200, 900))
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	// The browser signs in as alice on every request, forms included, as after a basic-auth
	// prompt.
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(alice.Name+":"+alice.Password))
	// Each step waits at most a while: a page that never shows what the step waits for (a
	// refusal instead of the receipt) fails the test instead of hanging it. The first step runs
	// without it, since it starts the browser, which lives as long as that step's context.
	started := false
	bounded := func() (context.Context, context.CancelFunc) {
		if !started {
			started = true
			return browser, func() {}
		}
		return context.WithTimeout(browser, 30*time.Second)
	}
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := bounded()
		defer cancel()
		require.NoError(t, chromedp.Do(ctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := bounded()
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, "the page has no %s: %s", sel, s)
		return s
	}
	screenshot := func(name string) {
		t.Helper()
		dir := os.Getenv("TEMPOTENT_SCREENSHOTS")
		if dir == "" {
			return
		}
		png, err := chromedp.Run(browser, chromedp.FullScreenshot(100)) // quality 100 makes a PNG
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644))
	}
	do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		return err
	}))

	do(chromedp.Navigate(srv.URL + "/"))
	overview := text("main")
	screenshot("overview")
	unresolved := chromedp.CSS(`a[href="/receipts?state=unresolved"]`)
	link := chromedp.CSS(`a[href="/receipts/` + tok + `"]`)
	resolve := `form[action$="/resolve"]`
	do(chromedp.Click(unresolved), chromedp.WaitVisible(link), chromedp.Click(link), chromedp.WaitVisible(chromedp.CSS(resolve)))
	receipt := text("main")
	do(
		chromedp.Click(chromedp.CSS(`input[name="outcome"][value="applied"]`)),
		chromedp.SendKeys(chromedp.CSS(resolve+` textarea[name="result"]`), `{"charge_id":"ch_browser_7"}`),
		chromedp.SendKeys(chromedp.CSS(resolve+` input[name="reason"]`), "INC-7: the provider's dashboard shows ch_browser_7"),
	)
	screenshot("resolve")
	do(chromedp.Click(chromedp.CSS(resolve+` button[type="submit"]`)), chromedp.WaitNotPresent(chromedp.CSS(resolve)))
	after := text("main")
	screenshot("resolved")
	do(chromedp.Navigate(srv.URL + "/audit"))
	audit := text("main")
	screenshot("audit")

	require.Contains(t, overview, "Waiting for a person")
	require.Contains(t, receipt, "Nobody knows whether the effect happened")
	require.Contains(t, after, "succeeded", "the receipt's page does not show it resolved")
	require.Contains(t, after, "ch_browser_7", "the operator does not see the decoded result")
	require.Contains(t, audit, "INC-7: the provider's dashboard shows ch_browser_7")
	require.Contains(t, audit, alice.Name)
	require.True(t, strings.Contains(audit, "resolve"))

	var got chargeResult
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, run.Get(wait, &got), "the workflow did not complete after the resolution")
	require.Equal(t, chargeResult{ChargeID: "ch_browser_7"}, got, "the next attempt did not replay the resolution")
	require.Equal(t, 1, charges(), "the provider charged again after the charge was resolved as applied")
}
