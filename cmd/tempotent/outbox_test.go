package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// hostile is what an attacker puts in a payload, a header or a downstream's error: a terminal
// title change, a screen clear, a C1 CSI, a bidirectional override, a bell.
const hostile = "\x1b]0;pwned\a\x1b[2J\u009b31m\u202egnp.exe\x7f"

// requireInert fails if out holds a rune that a terminal acts on (tabwriter's spaces and the
// lines' newlines aside).
func requireInert(t *testing.T, out string) {
	t.Helper()
	for _, r := range out {
		if r == '\n' {
			continue
		}
		require.False(t, r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e',
			"raw %U in the output:\n%s", r, out)
	}
}

// outboxOf puts msgs in a fresh outbox of the cli's schema.
func outboxOf(t *testing.T, ctx context.Context, schema string, msgs ...outbox.Message) *outbox.Outbox {
	t.Helper()
	o, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		for _, m := range msgs {
			if err := o.Put(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}))
	return o
}

// dies marks the messages ids dead with lastError, as a dispatcher out of attempts would.
func dies(t *testing.T, schema, lastError string, ids ...string) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), `UPDATE `+schema+`.outbox SET state = 'dead', attempts = 10, last_error = $2
		WHERE id = ANY ($1)`, ids, lastError)
	require.NoError(t, err)
}

// TestOutboxCommands: list shows what is stuck, show prints one message with its payload only on
// request, requeue and discard refuse what they must and audit what they do; all of it with the
// attacker's text escaped.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, tempotent := newStore(t)
	outboxOf(t, ctx, tempotent.schema,
		outbox.Message{ID: "order-17/paid", Topic: "order.paid", OrderingKey: "cust-4", Payload: []byte(`{"order":17}`)},
		outbox.Message{ID: "order-18/paid", Topic: "order.paid", OrderingKey: "cust-4", Payload: []byte(`{"order":18}`)},
		outbox.Message{ID: "order-19/placed", Topic: "order.placed", Payload: []byte(`{"order":19}`)},
		outbox.Message{ID: "evil", Topic: "order.placed", Payload: []byte(hostile), Headers: map[string]string{"X-Note": hostile}})
	dies(t, tempotent.schema, "HTTP 503 from https://ledger.example/hooks: upstream timeout", "order-17/paid")
	dies(t, tempotent.schema, "HTTP 400: "+hostile, "evil")

	list := tempotent.ok("outbox", "list", "--state", "dead")
	t.Logf("$ tempotent outbox list --state dead\n%s", list)
	requireInert(t, list)
	require.Contains(t, list, "order-17/paid")
	require.Contains(t, list, `"HTTP 400: \x1b]0;pwned\a\x1b[2J\u009b31m\u202egnp.exe\x7f"`)
	require.NotContains(t, list, "order-19/placed")
	all := tempotent.ok("outbox", "list", "--topic", "order.paid")
	t.Logf("$ tempotent outbox list --topic order.paid\n%s", all)
	require.Regexp(t, `order-18/paid\s+order.paid\s+cust-4\s+pending \(behind dead order-17/paid\)`, all,
		"the message held back by a dead one does not say so")
	require.Contains(t, tempotent.ok("outbox", "show", "order-18/paid"), "tempotent outbox show order-17/paid")

	// Pages, as JSON, with the hostile text escaped there too.
	var page struct {
		Messages []messageJSON `json:"messages"`
		Next     int64         `json:"next"`
	}
	raw := tempotent.ok("outbox", "list", "--limit", "3", "--json")
	requireInert(t, raw)
	require.NoError(t, json.Unmarshal([]byte(raw), &page))
	require.Len(t, page.Messages, 3)
	require.NotZero(t, page.Next)
	raw = tempotent.ok("outbox", "list", "--limit", "3", "--json", "--after", jsonInt(page.Next))
	require.NoError(t, json.Unmarshal([]byte(raw), &page))
	require.Len(t, page.Messages, 1)
	require.Equal(t, "evil", page.Messages[0].ID)
	require.Equal(t, "HTTP 400: "+hostile, page.Messages[0].LastError, "the JSON escapes do not decode to the text")

	shown := tempotent.ok("outbox", "show", "evil")
	requireInert(t, shown)
	require.Contains(t, shown, "\npayload       30 bytes (--payload prints them)\n", "the payload was printed without --payload")
	shown = tempotent.ok("outbox", "show", "evil", "--payload")
	requireInert(t, shown)
	require.Contains(t, shown, `payload       30 bytes: "\x1b]0;pwned\a\x1b[2J\u009b31m\u202egnp.exe\x7f"`)
	raw = tempotent.ok("outbox", "show", "evil", "--payload", "--json")
	requireInert(t, raw)
	var one messageJSON
	require.NoError(t, json.Unmarshal([]byte(raw), &one))
	require.Equal(t, []byte(hostile), one.Payload)
	require.Equal(t, hostile, one.Headers["X-Note"])

	// Wrong command lines, refusals: nothing recorded.
	for _, args := range [][]string{
		{"outbox", "requeue", "order-17/paid"},                                // no reason
		{"outbox", "requeue", "--reason", "x"},                                // no ID
		{"outbox", "requeue", "order-17/paid", "--all-dead", "--reason", "x"}, // both
		{"outbox", "discard", "order-17/paid", "--topic", "t", "--reason", "x"},
		{"outbox", "list", "--state", "stuck"},
		{"outbox", "list", "--limit", "5000"},
		{"outbox"},
	} {
		code, _, errOut := tempotent.run(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	code, _, errOut := tempotent.run("outbox", "requeue", "order-18/paid", "--reason", "x")
	require.Equal(t, exitRefused, code)
	require.Contains(t, errOut, "is pending")
	code, _, errOut = tempotent.run("outbox", "discard", "nope", "--reason", "x")
	require.Equal(t, exitRefused, code)
	require.Contains(t, errOut, "no such message")
	code, _, _ = tempotent.run("outbox", "show", "nope")
	require.Equal(t, exitRefused, code)
	require.Equal(t, 0, countRows(t, tempotent.schema+".audit"))

	out := tempotent.ok("outbox", "requeue", "order-17/paid", "--reason", "INC-12: ledger endpoint back", "--by", "oncall@example.com")
	t.Logf("$ tempotent outbox requeue order-17/paid --reason \"INC-12: ledger endpoint back\" --by oncall@example.com\n%s", out)
	require.Contains(t, out, "requeued order-17/paid")
	out = tempotent.ok("outbox", "discard", "--all-dead", "--topic", "order.placed", "--reason", "INC-13: poison", "--by", "oncall@example.com")
	t.Logf("$ tempotent outbox discard --all-dead --topic order.placed --reason \"INC-13: poison\" --by oncall@example.com\n%s", out)
	require.Contains(t, out, "discarded 1 dead message (audit: 1 row of outbox.discard by oncall@example.com)")
	shown = tempotent.ok("outbox", "show", "order-17/paid")
	t.Logf("$ tempotent outbox show order-17/paid\n%s", shown)
	require.Contains(t, shown, "outbox.requeue by oncall@example.com: INC-12: ledger endpoint back")
	require.Contains(t, shown, `"last_error": "HTTP 503`)
	require.Equal(t, 2, countRows(t, tempotent.schema+".audit"))
	require.Contains(t, tempotent.ok("outbox", "list", "--state", "dead"), "no messages match")
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func countRows(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// TestInboxAndWebhooksCommands: inbox counts per consumer and lists one's records; webhooks shows
// only the intakes', by source, with the delivery IDs escaped.
func TestInboxAndWebhooksCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, tempotent := newStore(t)
	for consumer, ids := range map[string][]string{
		"shipping":       {"order-17/paid", "order-18/paid"},
		"webhook/stripe": {`webhook/stripe/""/evt_1`, `webhook/stripe/"acme"/evt_2`, "webhook/stripe/\"\"/" + hostile},
	} {
		ib, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: consumer, Schema: tempotent.schema})
		require.NoError(t, err)
		for _, id := range ids {
			_, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, func(context.Context, pgx.Tx) error { return nil })
			require.NoError(t, err)
		}
	}
	out := tempotent.ok("inbox")
	t.Logf("$ tempotent inbox\n%s", out)
	require.Regexp(t, `shipping\s+2\s+2\s`, out)
	require.Regexp(t, `webhook/stripe\s+3\s+3\s`, out)

	out = tempotent.ok("webhooks")
	t.Logf("$ tempotent webhooks\n%s", out)
	require.Regexp(t, `SOURCE\s+ACCEPTED LAST 24h\s+DUPLICATE\s+REFUSED\s+FAILED\s+REASONS\s+KEPT\s`, out)
	require.Regexp(t, `\nstripe\s+3\s+0\s+0\s+0\s+-\s+3\s`, out)
	require.NotContains(t, out, "shipping")

	out = tempotent.ok("webhooks", "--source", "stripe")
	t.Logf("$ tempotent webhooks --source stripe\n%s", out)
	requireInert(t, out)
	require.Contains(t, out, `webhook/stripe/"acme"/evt_2`)
	require.Equal(t, 4, strings.Count(out, "\n"))

	var asJSON struct {
		Consumers []struct {
			Name    string `json:"name"`
			Records int64  `json:"records"`
		} `json:"consumers"`
	}
	require.NoError(t, json.Unmarshal([]byte(tempotent.ok("inbox", "--json")), &asJSON))
	require.Len(t, asJSON.Consumers, 2)
	code, _, _ := tempotent.run("inbox", "--limit", "0")
	require.Equal(t, exitUsage, code)
}
