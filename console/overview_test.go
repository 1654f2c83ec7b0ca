package console_test

import (
	"context"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/telemetry"
)

// findingRe finds the overview's findings: level, check, message.
var findingRe = regexp.MustCompile(`<tr class="finding-(\w+)[^"]*"><td>\w+</td><td>([\w-]+)</td><td>([^<]*)</td></tr>`)

// finding is one row of the overview's findings.
type finding struct{ level, check, message string }

// findings returns the overview's findings in the order shown.
func findings(page string) []finding {
	var out []finding
	for _, m := range findingRe.FindAllStringSubmatch(page, -1) {
		out = append(out, finding{m[1], m[2], html.UnescapeString(m[3])})
	}
	return out
}

// exec runs sql in e's schema (%s is the schema, quoted).
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := pgtest.Pool(e.t).Exec(context.Background(), strings.ReplaceAll(sql, "%s", `"`+e.schema+`"`), args...)
	require.NoError(e.t, err)
}

// The overview shows doctor's findings, failures first: an unresolved receipt and dead messages
// over the default limits fail, and the reader, who may see no payload, sees them too.
func TestOverviewShowsDoctorsFindings(t *testing.T) {
	t.Parallel()
	e := setup(t)

	all := findings(e.get("/", bob))
	require.Len(t, all, 8, "the healthy schema's findings")
	for _, f := range all {
		require.Equal(t, "ok", f.level, "%+v", f)
	}

	e.unknown("order-1")
	e.dead(script, "m-1", "m-2")
	page := e.get("/", bob)
	all = findings(page)
	require.Len(t, all, 8)
	require.Equal(t, finding{"fail", "unresolved", "unresolved receipts waiting for someone: 1, more than the limit of 0; resolve or re-arm each"}, all[0], "%+v", all)
	require.Equal(t, finding{"fail", "dead", "dead outbox messages: 2, more than the limit of 0; requeue or discard each"}, all[1], "%+v", all)
	for _, f := range all[2:] {
		require.Equal(t, "ok", f.level, "failures are not first: %+v", all)
	}
	require.Equal(t, "server", all[2].check, "the rest is not in Diagnose's order: %+v", all)
	require.NotContains(t, page, "payload of m-1", "the overview shows a payload to the reader")
	require.NotContains(t, page, script, "the overview does not escape a receiver's error")
}

// The overview shows, per webhook source within the window, the deliveries accepted (the inbox's
// count) and kept, apart from the other inbox consumers, and, from the handlers' tallies, those
// answered as duplicates, refused and failed, with their reasons; sources with tallies only are
// there too, names and reasons escaped, and the metrics it names exist.
func TestOverviewShowsWebhookIntakeBySource(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.Contains(t, e.get("/", bob), "No webhook deliveries kept or counted.")

	e.exec(`INSERT INTO %s.inbox (consumer, message_id, processed_at) VALUES
		('webhook/stripe', 'evt_1', now()), ('webhook/stripe', 'evt_2', now()), ('webhook/stripe', 'evt_0', now() - interval '2 hours'),
		('webhook/<b>github</b>', 'd-1', now()), ('orders', 'o-1', now())`)
	e.exec(`INSERT INTO %s.webhook_tallies (minute, source, outcome, reason, count) VALUES
		(date_trunc('minute', now()), 'stripe', 'accepted', '', 2),
		(date_trunc('minute', now()), 'stripe', 'duplicate', '', 4),
		(date_trunc('minute', now()), 'stripe', 'refused', 'signature', 40),
		(date_trunc('minute', now()) - interval '1 minute', 'stripe', 'refused', 'stale', 1),
		(date_trunc('minute', now()) - interval '3 hours', 'stripe', 'refused', 'stale', 500),
		(date_trunc('minute', now()), 'stripe', 'failed', 'store', 3),
		(date_trunc('minute', now()), 'forged-only', 'refused', 'signature', 9),
		(date_trunc('minute', now()), '<script>alert(1)</script>', 'refused', '<img src=x onerror=alert(2)>', 1)`)
	page := e.get("/", bob)
	webhooks := page[strings.Index(page, `<table class="webhooks">`):]
	webhooks = webhooks[:strings.Index(webhooks, "</table>")]
	require.Contains(t, webhooks, "<tr><td>stripe</td><td>2</td><td>4</td><td>41</td><td>3</td><td>signature 40, store 3, stale 1</td><td>3</td>",
		"stripe: two accepted within the hour, three kept; the tallies of the hour, the one before left out")
	require.Contains(t, webhooks, "<tr><td>&lt;b&gt;github&lt;/b&gt;</td><td>1</td><td>0</td><td>0</td><td>0</td><td>—</td><td>1</td>", "a source's name is not escaped")
	require.Contains(t, webhooks, "<tr><td>forged-only</td><td>0</td><td>0</td><td>9</td><td>0</td><td>signature 9</td><td>—</td><td>—</td></tr>", "a source with tallies only")
	require.Contains(t, webhooks, "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>")
	require.Contains(t, webhooks, "<td>&lt;img src=x onerror=alert(2)&gt; 1</td>")
	require.NotContains(t, page, "<script>alert")
	require.NotContains(t, page, "<img src=x")
	require.NotContains(t, webhooks, "orders", "an inbox consumer shown as a webhook source")
	require.Contains(t, page, "<td>orders</td>", "the other consumers are no longer shown")
	for _, metric := range []string{telemetry.WebhookAccepted, telemetry.WebhookDuplicate, telemetry.WebhookRefused, telemetry.WebhookFailed} {
		require.Contains(t, page, metric)
	}
}

// purgeRe finds the overview's count of settled receipts not purged yet.
var purgeRe = regexp.MustCompile(`(\d+) settled receipts are past their retention and not purged yet(; the oldest expired (\S+) ago)?`)

// The overview shows what purge has left: settled receipts past their retention (not the
// unresolved it keeps) and the oldest, and the inbox consumers holding records older than the
// default retention.
func TestOverviewShowsThePurgeBacklog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	page := e.get("/", bob)
	require.Equal(t, []string{"0 settled receipts are past their retention and not purged yet", "0", "", ""}, purgeRe.FindStringSubmatch(page)[:4])
	require.Contains(t, page, "No inbox records older than the workers' inbox retention of 720h0m0s.")
	require.Contains(t, page, "A growing number means no worker purges: see TempotentPurgeNotReporting / TempotentPurgeFailing")

	e.succeeded("old-1", chargeResult{ChargeID: "ch_1"})
	e.succeeded("old-2", chargeResult{ChargeID: "ch_2"})
	e.succeeded("fresh", chargeResult{ChargeID: "ch_3"})
	e.unknown("kept")
	e.exec(`UPDATE %s.receipts SET expires_at = now() - interval '2 hours' WHERE id IN ('old-1', 'kept')`)
	e.exec(`UPDATE %s.receipts SET expires_at = now() - interval '1 minute' WHERE id = 'old-2'`)
	e.exec(`INSERT INTO %s.inbox (consumer, message_id, processed_at) VALUES
		('webhook/stripe', 'evt_old', now() - interval '31 days'), ('webhook/stripe', 'evt_new', now()), ('orders', 'o-1', now() - interval '2 days')`)
	page = e.get("/", bob)
	m := purgeRe.FindStringSubmatch(page)
	require.NotNil(t, m, page)
	require.Equal(t, "2", m[1], "the unresolved receipt purge keeps is counted, or an expired one is not")
	require.Regexp(t, `^2h0m\d+s$`, m[3], "the oldest is not the longest-expired")
	overdue := page[strings.Index(page, `<table class="overdue">`):]
	overdue = overdue[:strings.Index(overdue, "</table>")]
	require.Contains(t, overdue, `<tr class="alert"><td>webhook/stripe</td><td>2</td>`)
	require.NotContains(t, overdue, "orders", "a consumer with no record past the retention is shown as overdue")
}

// lastPurgeRe finds the overview's paragraphs on the purger's last run.
var lastPurgeRe = regexp.MustCompile(`<p class="last-purge[^"]*">(.*)</p>`)

// lastPurgeText is what the overview says of the purger's last run, tags stripped and text
// unescaped, one paragraph a line.
func lastPurgeText(page string) string {
	var lines []string
	for _, m := range lastPurgeRe.FindAllStringSubmatch(page, -1) {
		lines = append(lines, html.UnescapeString(regexp.MustCompile(`</?code>`).ReplaceAllString(m[1], "")))
	}
	return strings.Join(lines, "\n")
}

// The overview shows the purger's last run: never, then when, by whom, for how long and what
// it deleted; a failed run's error, escaped, and the last success; doctor's finding warns of it.
func TestOverviewShowsThePurgersLastRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	require.Equal(t, "The purger never ran: no purge round is recorded in this schema (each round a worker runs is).", lastPurgeText(e.get("/", bob)))

	now := time.Now()
	require.NoError(t, e.op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-a/41",
		Started: now, Finished: now.Add(2 * time.Second), Receipts: 12, Inbox: 3}))
	run, _, err := e.op.LastRun(ctx, operator.TaskPurge)
	require.NoError(t, err)
	page := e.get("/", bob)
	require.Regexp(t, `^The purger last ran `+regexp.QuoteMeta(run.Finished.UTC().Format("2006-01-02 15:04:05Z"))+
		` \(\d+s ago\), by host-a/41, for 2s: it deleted 12 receipts and 3 inbox records\.$`, lastPurgeText(page))
	require.NotContains(t, page, `class="last-purge error"`)

	require.NoError(t, e.op.RecordMaintenanceRun(ctx, operator.MaintenanceRun{Task: operator.TaskPurge, Runner: "host-" + script,
		Started: now, Finished: now, Receipts: 1, Error: "purge: " + script}))
	page = e.get("/", bob)
	text := lastPurgeText(page)
	require.Contains(t, text, "by host-"+script+", for 0s: it deleted 1 receipts and 0 inbox records.")
	require.Contains(t, text, "\nThat run failed: purge: "+script+". The last run that succeeded: "+run.LastSuccess.UTC().Format("2006-01-02 15:04:05Z")+".")
	require.NotContains(t, strings.ToLower(page), "<script", "the runner or the error is not escaped")
	var purge *finding
	for _, f := range findings(page) {
		if f.check == string(operator.CheckPurge) {
			purge = &f
		}
	}
	require.NotNil(t, purge, "no purge finding")
	require.Equal(t, "warn", purge.level)
	require.Contains(t, purge.message, `failed: "purge: <script>alert(\"pwned\")</script>"`)

	e.exec(`UPDATE %s.maintenance_runs SET last_success_at = NULL`)
	require.Contains(t, lastPurgeText(e.get("/", bob)), "The last run that succeeded: none.")
}
