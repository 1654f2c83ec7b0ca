package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// An operator re-arms a refund that failed for good: the command refuses a wrong command line
// and a receipt that did not fail, records who and why, and the next attempt runs the refund
// again under the same token.
func TestReceiptsRearm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tempotent := newStore(t)
	c := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Refund", ID: "order-7"}, DownstreamDeduplicates: true}
	c.Fingerprint, _ = keys.FingerprintOf(7)
	calls := 0
	refund := func(fail bool) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			calls++
			if fail {
				return "", temporal.NewNonRetryableApplicationError("account blocked", "Rejected", nil)
			}
			return "re_1", nil
		}
	}
	_, err := activity.Do(ctx, s, c, refund(true))
	require.ErrorContains(t, err, "account blocked")
	tok := string(c.Key.Token())

	for _, args := range [][]string{
		{"receipts", "rearm", tok},                     // no reason
		{"receipts", "rearm", "--reason", "unblocked"}, // no token
		{"receipts", "rearm", tok, "other", "--reason", "x"},
	} {
		code, _, errOut := tempotent.run(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	code, _, errOut := tempotent.run("receipts", "rearm", "no-such-token", "--reason", "x")
	require.Equal(t, exitRefused, code)
	require.Contains(t, errOut, "no receipt")

	out := tempotent.ok("receipts", "rearm", tok, "--reason", "INC-9: account unblocked", "--by", "ops@example.com")
	t.Logf("$ tempotent receipts rearm %s ...\n%s", tok, out)
	require.Contains(t, out, "re-armed "+tok)
	require.Contains(t, out, "cleared: Rejected: account blocked")
	require.Contains(t, out, "by ops@example.com: INC-9: account unblocked")

	got, err := activity.Do(ctx, s, c, refund(false))
	require.NoError(t, err)
	require.Equal(t, "re_1", got)
	require.Equal(t, 2, calls)

	code, _, errOut = tempotent.run("receipts", "rearm", tok, "--reason", "again")
	require.Equal(t, exitRefused, code, "a succeeded receipt was re-armed")
	require.Contains(t, errOut, "succeeded")
	shown := tempotent.ok("receipts", "show", tok)
	require.Contains(t, shown, "audit")
	require.Contains(t, shown, "rearm by ops@example.com: INC-9: account unblocked")
	var asJSON receiptJSON
	require.NoError(t, json.Unmarshal([]byte(tempotent.ok("receipts", "show", tok, "--json")), &asJSON))
	require.Len(t, asJSON.Audit, 1)
	require.Equal(t, "rearm", asJSON.Audit[0].Action)
	var detail map[string]any
	require.NoError(t, json.Unmarshal(asJSON.Audit[0].Detail, &detail))
	require.Equal(t, "Rejected", detail["error_type"])
}

// What a receipt holds can come from outside: an operator's reason and name, an error message, a
// workflow ID. receipts show and list print it so that a terminal executes none of it.
func TestReceiptsPrintNothingATerminalExecutes(t *testing.T) {
	s, tempotent := newStore(t)
	tok := unknownReceipt(t, s, "order-esc")
	hostile := "INC-1 \x1b]0;owned\x07 \x1b[2J \u009b31m \u202egnp.exe"
	tempotent.ok("receipts", "resolve", tok.String(), "--not-applied", "--reason", hostile, "--by", "oncall\x1b[8m")
	for _, args := range [][]string{{"receipts", "show", tok.String()}, {"receipts", "show", tok.String(), "--json"}, {"receipts", "list", "--json"}} {
		out := tempotent.ok(args...)
		for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e"} {
			require.NotContains(t, out, bad, "tempotent %s printed %q raw:\n%s", strings.Join(args, " "), bad, out)
		}
		if args[len(args)-1] != "--json" {
			require.Contains(t, out, `\x1b]0;owned\a`, "the reason is not shown, quoted")
		}
	}
}
