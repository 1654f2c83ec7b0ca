package devserver_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/devserver"
)

func cli(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../bin/temporal")
	require.NoError(t, err)
	return p
}

// A server that cannot start (here its port is taken, as when another process binds a free
// port between freeport.Get and the server) is reported as soon as it exits, with what it
// printed, not after ReadyTimeout as "did not answer".
func TestAServerThatExitsIsReportedWithItsOutput(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	_, err = devserver.Start(context.Background(), devserver.Options{CLI: cli(t), Port: port, ReadyTimeout: 10 * time.Minute})
	var exited *devserver.ExitedError
	require.ErrorAs(t, err, &exited)
	require.Contains(t, exited.Output, "address already in use", "the error carries what the server printed")
	require.Error(t, exited.Err, "the exit status is kept")
}

// A server on a port Start picked answers, and Stop ends it.
func TestStartAndStop(t *testing.T) {
	srv, err := devserver.Start(context.Background(), devserver.Options{CLI: cli(t)})
	require.NoError(t, err)
	defer srv.Stop()
	_, err = srv.Client().CheckHealth(context.Background(), nil)
	require.NoError(t, err)
	srv.Stop()
	var opErr *net.OpError
	_, err = net.Dial("tcp", srv.Addr())
	require.True(t, errors.As(err, &opErr), "the server still accepts connections after Stop: %v", err)
}

// When Start picked the port and the server exits before answering (its port, or one of the
// ports the CLI picks for itself, taken under it), Start tries again on another port. The CLI
// here is a script that fails as a lost port race does the first time, then runs the real one.
func TestStartTriesAnotherPortWhenTheServerExits(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "temporal")
	runs := filepath.Join(dir, "runs")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
echo run >> "`+runs+`"
if [ "$(wc -l < "`+runs+`")" -eq 1 ]; then
	echo 'level=ERROR msg="listen tcp: bind: address already in use"' >&2
	exit 1
fi
exec "`+cli(t)+`" "$@"
`), 0o755))

	srv, err := devserver.Start(context.Background(), devserver.Options{CLI: script})
	require.NoError(t, err)
	defer srv.Stop()
	b, err := os.ReadFile(runs)
	require.NoError(t, err)
	require.Equal(t, "run\nrun\n", string(b), "Start tried once more after the first server exited")

	// With a port given, Start does not pick another one behind the caller's back.
	require.NoError(t, os.WriteFile(runs, nil, 0o644))
	_, err = devserver.Start(context.Background(), devserver.Options{CLI: script, Port: 1})
	var exited *devserver.ExitedError
	require.ErrorAs(t, err, &exited)
	require.Contains(t, exited.Output, "address already in use")
}
