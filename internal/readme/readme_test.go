// Package readme checks that the README's Go quickstart compiles as written.
package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuickstartCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
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

	for _, args := range [][]string{{"vet", "./" + dir}, {"build", "-o", os.DevNull, "./" + dir}} {
		out, err := exec.Command("go", args...).CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	}
}
