package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// uiOutput hands each write to a channel, so that the test learns the console's address as
// soon as the command prints it.
type uiOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *uiOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.lines <- string(p):
	default:
	}
	return len(p), nil
}

// tempotent ui serves the console with the users of its file until it is stopped, and exits 0.
func TestUIServesTheConsole(t *testing.T) {
	t.Parallel()
	_, c := newStore(t)
	users := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(users, []byte("# who may sign in\nalice@example.com operator alice-password-1\n\nbob reader bob-password-22\n"), 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	out := &uiOutput{lines: make(chan string, 1)}
	env := map[string]string{"DATABASE_URL": pgtest.URL(), "TEMPOTENT_SCHEMA": c.schema, "TEMPOTENT_UI_USERS": users}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"ui", "--listen", "127.0.0.1:0"}, out, io.Discard, func(k string) string { return env[k] })
	}()
	var url string
	select {
	case line := <-out.lines:
		m := regexp.MustCompile(`http://[0-9.:]+/`).FindString(line)
		require.NotEmpty(t, m, "the command printed no address: %q", line)
		url = m
	case c := <-code:
		t.Fatalf("tempotent ui exited %d before serving", c)
	}

	get := func(name, password string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if name != "" {
			req.SetBasicAuth(name, password)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	status, body := get("bob", "bob-password-22")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "Waiting for a person")
	status, _ = get("", "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = get("bob", "alice-password-1")
	require.Equal(t, http.StatusUnauthorized, status)

	cancel()
	require.Equal(t, exitOK, <-code)
}

// tempotent ui refuses, before connecting, what would expose the console.
func TestUIRefusesAnExposedConsole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	require.NoError(t, os.WriteFile(open, []byte("alice operator alice-password-1\n"), 0o644))
	good := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(good, []byte("alice operator alice-password-1\n"), 0o600))
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("alice admin alice-password-1\n"), 0o600))
	c := cli{t: t, schema: "unused"}
	for args, want := range map[string]string{
		"":                "give --users",
		"--users " + open: "chmod 600",
		"--users " + bad:  `role "admin"`,
		"--users " + good + " --listen 0.0.0.0:0":                               "not a loopback address",
		"--users " + good + " --listen :8080":                                   "not a loopback address",
		"--insecure-local-reader --listen 192.0.2.1:0 --tls-cert x --tls-key y": "needs a loopback",
		"--users " + good + " --tls-cert x":                                     "both --tls-cert and --tls-key",
	} {
		code, _, stderr := c.run(append([]string{"ui"}, uiArgs(args)...)...)
		require.Equal(t, exitUsage, code, "tempotent ui %s: %s", args, stderr)
		require.Contains(t, stderr, want, "tempotent ui %s", args)
	}
}

func uiArgs(s string) []string { return regexp.MustCompile(`\S+`).FindAllString(s, -1) }
