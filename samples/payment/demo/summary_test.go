package demo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// When anything waits for a person, the summary says which command shows it.
func TestSummaryNamesTheCommandForUnresolvedReceipts(t *testing.T) {
	var out strings.Builder
	Summary{Unresolved: 1, UnresolvedReceipts: 2, Operate: operateCommand("postgres://db", "demo")}.print(&out)
	require.Contains(t, out.String(), "Receipts waiting for a person: 2")
	require.Contains(t, out.String(), "DATABASE_URL='postgres://db' TEMPOTENT_SCHEMA=demo go run ./cmd/tempotent receipts list --state unresolved")

	out.Reset()
	Summary{Operate: operateCommand("", "tempotent")}.print(&out)
	require.Contains(t, out.String(), "go run ./cmd/tempotent stats")
	require.NotContains(t, out.String(), "waiting for a person")
}
