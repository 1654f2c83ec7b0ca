// Package deploy_test checks the alerting rules and the dashboard of deploy/ against the metrics
// the code exports: every metric they name exists (telemetry.Metrics), under the name the SDK's
// Prometheus reporter gives it, and promtool finds the rules valid and firing.
package deploy_test

import (
	"bufio"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/telemetry"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

const (
	rulesFile     = "prometheus/tempotent-rules.yml"
	rulesTestFile = "prometheus/tempotent-rules.test.yml"
	dashboardFile = "grafana/tempotent.json"
)

// metricName finds the names in a PromQL expression that are ours.
var metricName = regexp.MustCompile(`\btempotent_[A-Za-z0-9_:]*`)

// TestRulesNameExportedMetrics: every expression of the alerting rules names at least one
// metric, and each tempotent_ name in it is one that Prometheus scrapes (exported).
func TestRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	names := exported(t)
	exprs, alerts := ruleExprs(t, rulesFile)
	require.Len(t, exprs, alerts, "%s: each alert needs one expr, and each expr must be read (one line, or a | or > block)", rulesFile)
	for _, e := range exprs {
		requireExported(t, names, rulesFile, e)
	}
}

// TestDashboardNamesExportedMetrics: every query of the dashboard names only exported metrics,
// and the dashboard shows every metric of telemetry.Metrics.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	t.Parallel()
	names := exported(t)
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(raw, &dash), "%s is not JSON", dashboardFile)
	var exprs []string
	walkJSON(dash, func(key string, v any) {
		if s, ok := v.(string); ok && key == "expr" {
			exprs = append(exprs, s)
		}
	})
	require.NotEmpty(t, exprs, "%s has no queries", dashboardFile)
	shown := map[string]bool{}
	for _, e := range exprs {
		for _, n := range requireExported(t, names, dashboardFile, e) {
			shown[names[n]] = true
		}
	}
	for _, m := range telemetry.Metrics() {
		require.True(t, shown[m], "%s shows no panel of %s", dashboardFile, m)
	}
}

// TestRulesFire runs promtool: the rules are valid (check rules) and each alert fires on the
// series of the rules' unit tests, and only then (test rules). make lint runs the same; this
// test skips where promtool is not installed (Debian's prometheus package has it).
func TestRulesFire(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus): make lint checks the rules")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// exported maps each name Prometheus scrapes to the metric of telemetry.Metrics it comes from,
// as the SDK's handlers export them (see the rules file's header): a gauge under its own name, a
// counter with "_total" appended (go.temporal.io/sdk/contrib/tally's NewPrometheusNamingScope;
// OpenTelemetry's Prometheus exporter, given contrib/opentelemetry's UseMonotonicCounters).
func exported(t *testing.T) map[string]string {
	t.Helper()
	gauges := gaugesSent(t)
	names := map[string]string{}
	for _, m := range telemetry.Metrics() {
		if gauges[m] {
			names[m] = m
		} else {
			names[m+"_total"] = m
		}
	}
	return names
}

// requireExported fails unless expr names at least one metric and every tempotent_ name in it
// is exported; it returns the names.
func requireExported(t *testing.T, names map[string]string, file, expr string) []string {
	t.Helper()
	used := metricName.FindAllString(expr, -1)
	require.NotEmpty(t, used, "%s: %q names no tempotent metric", file, expr)
	for _, n := range used {
		_, ok := names[n]
		require.True(t, ok, "%s: %q names %s, which is not exported: a gauge is named as in the telemetry package, a counter with _total (known: %s)",
			file, expr, n, strings.Join(sortedKeys(names), ", "))
	}
	return used
}

// gaugesSent reads the module's Go files (tests aside) and returns the metrics sent as gauges:
// the argument of every call .Gauge(name), which must be a constant naming a metric of
// telemetry.Metrics, directly or through another package's constant. Every other metric is a
// counter. A gauge whose name the test cannot resolve fails it, so none passes for a counter.
func gaugesSent(t *testing.T) map[string]bool {
	t.Helper()
	consts := map[string]ast.Expr{} // "pkg.Name" → its value's expression
	type call struct {
		pkg   string
		arg   ast.Expr
		where string
	}
	var calls []call
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir // another module's, or not code
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							consts[pkg+"."+name.Name] = vs.Values[i]
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok && len(c.Args) == 1 {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Gauge" {
					calls = append(calls, call{pkg, c.Args[0], fset.Position(c.Pos()).String()})
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)

	var resolve func(pkg string, e ast.Expr) (string, bool)
	resolve = func(pkg string, e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			if v, ok := consts[pkg+"."+e.Name]; ok {
				return resolve(pkg, v)
			}
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				if v, ok := consts[x.Name+"."+e.Sel.Name]; ok {
					return resolve(x.Name, v)
				}
			}
		}
		return "", false
	}
	gauges := map[string]bool{}
	for _, c := range calls {
		name, ok := resolve(c.pkg, c.arg)
		require.True(t, ok && slices.Contains(telemetry.Metrics(), name),
			"%s: a gauge whose name is not a constant of telemetry.Metrics; name it there, so that rules and dashboards can use it", c.where)
		gauges[name] = true
	}
	require.NotEmpty(t, gauges, "no .Gauge(name) call found: has the module moved?")
	return gauges
}

// ruleExprs reads the expr of every rule in a Prometheus rule file, and counts its alerts,
// without a YAML library (the module has no YAML dependency, and gains none for a test): an expr
// is either on its key's line or a block scalar (| or >, with chomping) of the lines indented
// deeper than its key. promtool check rules is what says the file is valid YAML.
func ruleExprs(t *testing.T, file string) (exprs []string, alerts int) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "- alert:") {
			alerts++
		}
		value, ok := strings.CutPrefix(strings.TrimPrefix(line, "- "), "expr:")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if value == "" || strings.ContainsAny(value[:1], "|>") {
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > indent(lines[i])) {
				i++
				block = append(block, strings.TrimSpace(lines[i]))
			}
			value = strings.Join(block, "\n")
		} else if unq, err := strconv.Unquote(value); err == nil {
			value = unq
		} else {
			value = strings.Trim(value, "'")
		}
		require.NotEmpty(t, strings.TrimSpace(value), "%s:%d: an empty expr", file, i+1)
		exprs = append(exprs, value)
	}
	return exprs, alerts
}

// walkJSON calls fn with every key and value of v, depth first.
func walkJSON(v any, fn func(key string, v any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			fn(k, x)
			walkJSON(x, fn)
		}
	case []any:
		for _, x := range v {
			walkJSON(x, fn)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
