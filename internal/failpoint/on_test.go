//go:build tempotent_failpoints

package failpoint

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		spec string
		want map[string]string
	}{
		{"Empty", "", nil},
		{"One", AfterDownstream + "=pause", map[string]string{AfterDownstream: "pause"}},
		{"Several", AfterReserve + "=kill, " + InCompensation + "=pause",
			map[string]string{AfterReserve: "kill", InCompensation: "pause"}},
		{"NoAction", AfterComplete, map[string]string{AfterComplete: ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, parse(tt.spec))
		})
	}
}

// child runs this test binary again as a process of its own, running only the test named run
// with the failpoints in spec armed, and returns the command, not yet started.
func child(t *testing.T, run, spec string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), EnvVar+"="+spec, "TEMPOTENT_FAILPOINT_CHILD=1")
	return cmd
}

// inChild reports whether this process is a child started by child.
func inChild() bool { return os.Getenv("TEMPOTENT_FAILPOINT_CHILD") == "1" }

func TestHitKill(t *testing.T) {
	if inChild() {
		Hit(AfterReserve) // not armed: returns
		Hit(AfterDownstream)
		os.Stdout.WriteString("Hit returned\n")
		return
	}
	t.Parallel()
	out, err := child(t, "TestHitKill", AfterDownstream+"=kill").CombinedOutput()
	require.Error(t, err, "the armed point must kill the process; output:\n%s", out)
	require.Contains(t, string(out), "failpoint "+AfterDownstream+" reached\n")
	require.NotContains(t, string(out), "failpoint "+AfterReserve+" reached", "an unarmed point must not stop the process")
	require.NotContains(t, string(out), "Hit returned")
}

func TestHitPause(t *testing.T) {
	if inChild() {
		Hit(InCompensation)
		os.Stderr.WriteString("Hit returned\n")
		return
	}
	t.Parallel()
	cmd := child(t, "TestHitPause", InCompensation+"=pause")
	// A pipe of our own rather than StderrPipe, which Wait closes while it may still be read.
	stderr, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stderr = w
	require.NoError(t, cmd.Start())
	require.NoError(t, w.Close())
	var waitErr error
	exited := make(chan struct{}) // closed once waitErr is set
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited; _ = stderr.Close() })

	reached := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "failpoint ") || s.Text() == "Hit returned" {
				reached <- s.Text()
				return
			}
		}
		close(reached)
	}()
	select {
	case line := <-reached:
		require.Equal(t, "failpoint "+InCompensation+" reached", line)
	case <-time.After(time.Minute):
		t.Fatal("the child did not reach the failpoint within a minute")
	}

	select {
	case <-exited:
		t.Fatalf("the child exited (%v); a paused failpoint must block it", waitErr)
	case <-time.After(time.Second):
	}
}
