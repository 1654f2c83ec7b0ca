//go:build linux

package pgtest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// TestClusterServes starts a cluster of its own and runs a statement on it: it is another
// server than TEST_DATABASE_URL's.
func TestClusterServes(t *testing.T) {
	url := pgtest.Cluster(t)
	require.NotEqual(t, pgtest.URL(), url)
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var port int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, url, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port))
}

// TestClusterDiesWithItsStarter SIGKILLs a test binary that started a cluster (no cleanup runs,
// as when go test's -timeout ends it) and requires the cluster's postmaster to die with it.
func TestClusterDiesWithItsStarter(t *testing.T) {
	if dir := os.Getenv("PGTEST_CLUSTER_STARTER"); dir != "" {
		s, err := pgtest.NewCluster(context.Background(), dir)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("postmaster", s.Process.Cmd.Process.Pid)
		select {} // until killed
	}
	dir, err := os.MkdirTemp("", "tempotent-pg-") // not t.TempDir: the postgres user must reach it
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterDiesWithItsStarter$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGTEST_CLUSTER_STARTER="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the starter printed nothing")
	pidText, ok := strings.CutPrefix(strings.TrimSpace(line), "postmaster ")
	require.True(t, ok, "the starter said %q", line)
	pid, err := strconv.Atoi(pidText)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, 0), "the postmaster is not running")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	// The postmaster is no child of this process: nothing signals its end here, so its pid is
	// polled until it is gone, or a zombie (dead, and not reaped by whoever adopted it). The
	// test's own -timeout bounds the wait.
	for syscall.Kill(pid, 0) == nil {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
