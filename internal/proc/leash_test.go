//go:build linux

package proc_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/proc"
)

// TestChildrenDieWithTheirStarter kills (SIGKILL: no cleanup runs, as when go test's -timeout or
// a mutation tool ends a test binary) a process that started a long-running child through
// proc.Start, and requires the child to die with it: a test that starts dev servers, workers or
// fakepays must not leave them behind.
func TestChildrenDieWithTheirStarter(t *testing.T) {
	if os.Getenv("PROC_TEST_STARTER") == "1" {
		starter()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithTheirStarter$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PROC_TEST_STARTER=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// The starter prints its child's PID, then waits to be killed.
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the starter never printed its child's PID")
	child, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "child ")))
	require.NoError(t, err, "the starter printed %q", line)
	require.True(t, alive(child), "the child %d is not running before its starter is killed", child)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !alive(child) }, 30*time.Second, 10*time.Millisecond,
		"the child %d outlived the process that started it", child)
}

// starter is the killed process: it starts a child that would run for ten minutes, prints its
// PID, and waits.
func starter() {
	p, err := proc.Start(exec.Command("sleep", "600"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Printf("child %d\n", p.Cmd.Process.Pid)
	<-context.Background().Done()
}

// alive reports whether pid is a process that has not exited (a zombie waiting for its new parent
// to reap it counts as exited).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's name, which is in parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}
