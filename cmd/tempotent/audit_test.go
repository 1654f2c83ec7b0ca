package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tempotent audit prints every operator action, newest first, a page at a time, with what people
// wrote quoted.
func TestAuditCommand(t *testing.T) {
	s, tempotent := newStore(t)
	require.Contains(t, tempotent.ok("audit"), "no audit records")
	first := unknownReceipt(t, s, "order-a1")
	second := unknownReceipt(t, s, "order-a2")
	tempotent.ok("receipts", "resolve", first.String(), "--not-applied", "--reason", "INC-1 gateway shows nothing", "--by", "ann")
	tempotent.ok("receipts", "resolve", second.String(), "--not-applied", "--reason", "INC-2 \x1b[2J", "--by", "bob")

	page := tempotent.ok("audit", "--limit", "1")
	require.Contains(t, page, second.String(), "the newest record is not first")
	require.NotContains(t, page, first.String())
	require.Contains(t, page, `INC-2 \x1b[2J`, "the reason is not shown quoted")
	require.NotContains(t, page, "\x1b")
	var next string
	for _, line := range strings.Split(page, "\n") {
		if after, ok := strings.CutPrefix(line, "more: add --before "); ok {
			next = after
		}
	}
	require.NotEmpty(t, next, "a full page does not say how to read the next")
	older := tempotent.ok("audit", "--limit", "1", "--before", next)
	require.Contains(t, older, first.String())
	require.Contains(t, older, "ann")

	var out struct {
		Audit []struct {
			ID     int64  `json:"id"`
			Action string `json:"action"`
			Target string `json:"target"`
			Actor  string `json:"actor"`
			Reason string `json:"reason"`
		} `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(tempotent.ok("audit", "--json")), &out))
	require.Len(t, out.Audit, 2)
	require.Equal(t, []string{second.String(), first.String()}, []string{out.Audit[0].Target, out.Audit[1].Target})
	require.Equal(t, "INC-2 \x1b[2J", out.Audit[0].Reason, "JSON does not give the reason back as written")
	require.Greater(t, out.Audit[0].ID, out.Audit[1].ID)

	for _, bad := range [][]string{{"audit", "--limit", "0"}, {"audit", "--limit", "1001"}, {"audit", "--before", "-1"}, {"audit", "extra"}} {
		code, _, _ := tempotent.run(bad...)
		require.Equal(t, exitUsage, code, "tempotent %s", strings.Join(bad, " "))
	}
}
