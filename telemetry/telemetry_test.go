package telemetry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/telemetry"
)

// TestMetricsListsEveryMetric: every metric name this package declares (a constant whose value
// starts with "tempotent_") is in Metrics, once, so that a dashboard built from Metrics misses
// none.
func TestMetricsListsEveryMetric(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "telemetry.go", nil, 0)
	require.NoError(t, err)
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(v, "tempotent_") {
				declared = append(declared, v)
			}
		}
		return true
	})
	got := telemetry.Metrics()
	require.NotEmpty(t, declared)
	require.ElementsMatch(t, declared, got, "Metrics must list every metric name declared, and nothing else")
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	require.Len(t, slices.Compact(sorted), len(got), "a metric name is listed twice")
}
