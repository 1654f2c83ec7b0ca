// Package readme checks that the README's Go quickstart, copied word for word, builds and runs
// against the real Temporal dev server and Postgres, and does what the README says it prints.
package readme

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/internal/pgtest"
)

func TestQuickstartRuns(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(readme), "<!-- quickstart -->\n```go\n")
	require.True(t, ok, "README.md has no <!-- quickstart --> Go block")
	code, _, ok := strings.Cut(block, "```\n<!-- /quickstart -->")
	require.True(t, ok, "the quickstart block is not closed")

	// A directory starting with "_" is inside the module (so its imports resolve) but outside
	// ./... patterns.
	dir, err := os.MkdirTemp(".", "_quickstart")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644))
	bin := filepath.Join(t.TempDir(), "quickstart")
	for _, args := range [][]string{{"vet", "./" + dir}, {"build", "-o", bin, "./" + dir}} {
		out, err := exec.Command("go", args...).CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	}

	cli, err := filepath.Abs("../../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	srv, err := devserver.Start(context.Background(), devserver.Options{CLI: cli})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)

	schema := "readme_quickstart"
	drop := func() {
		_, err := pgtest.Pool(t).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	}
	drop()
	t.Cleanup(drop)

	run := exec.Command(bin)
	run.Env = append(os.Environ(), "DATABASE_URL="+pgtest.URL(), "TEMPORAL_ADDRESS="+srv.Addr(), "TEMPOTENT_SCHEMA="+schema)
	out, err := run.Output()
	require.NoError(t, err, "the quickstart failed: %s", out)
	got := regexp.MustCompile(`(?m)^checkout-(\d) got (ch_\S+) \(4200 cents\)$`).FindAllStringSubmatch(string(out), -1)
	require.Len(t, got, 2, "the quickstart printed:\n%s", out)
	require.Equal(t, got[0][2], got[1][2], "two checkouts of one order got different charges")
	require.Contains(t, string(out), "provider calls: 1\n", "the provider was not called exactly once")
}

// TestTestingSectionRuns runs the README's activitytest example, copied word for word, as a test
// of its own: it must pass, and it must fail once the token is no longer sent.
func TestTestingSectionRuns(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(readme), "<!-- activitytest -->\n```go\n")
	require.True(t, ok, "README.md has no <!-- activitytest --> Go block")
	code, _, ok := strings.Cut(block, "```\n<!-- /activitytest -->")
	require.True(t, ok, "the activitytest block is not closed")
	require.Less(t, strings.Count(code, "\n"), 30, "the README promises a test in under 30 lines")

	run := func(code string) (string, error) {
		dir, err := os.MkdirTemp(".", "_activitytest")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		require.NoError(t, os.WriteFile(filepath.Join(dir, "payments_test.go"), []byte(code), 0o644))
		out, err := exec.Command("go", "test", "-count=1", "./"+dir).CombinedOutput()
		return string(out), err
	}
	out, err := run(code)
	require.NoError(t, err, "the README's test fails: %s", out)

	unsafe := strings.Replace(code, `resp, err := client.Do(req)`, "resp, err := http.DefaultClient.Do(req) // no key\n\t\t_ = client", 1)
	require.NotEqual(t, code, unsafe)
	out, err = run(unsafe)
	require.Error(t, err, "the README's test passes an activity that sends no key")
	require.Contains(t, out, "crash after the effect, before the receipt: 2 effects for one intent, want 1")
}
