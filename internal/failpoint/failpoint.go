// Package failpoint stops a process at a named point so that fault tests can kill it there with
// a real signal. It does nothing unless the environment variable TEMPOTENT_FAILPOINTS names
// points, as comma-separated name=action pairs:
//
//	TEMPOTENT_FAILPOINTS=activity.after-downstream=pause
//
// Actions: "pause" blocks the goroutine that reached the point forever (the test then sends
// SIGKILL or SIGSTOP), "kill" sends SIGKILL to the process itself. On reaching a point it writes
// "failpoint <name> reached" to stderr, which the test waits for.
package failpoint

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Names of the points compiled into tempotent and its sample.
const (
	AfterReserve    = "activity.after-reserve"    // the receipt is reserved; the function has not run
	AfterDownstream = "activity.after-downstream" // the function returned; its outcome is not recorded
	AfterComplete   = "activity.after-complete"   // the outcome is recorded; Temporal has not heard of it
	InCompensation  = "sample.in-compensation"    // a compensation's downstream call returned
)

// EnvVar names the failpoints to arm.
const EnvVar = "TEMPOTENT_FAILPOINTS"

var armed = parse(os.Getenv(EnvVar))

func parse(spec string) map[string]string {
	if spec == "" {
		return nil
	}
	m := map[string]string{}
	for field := range strings.SplitSeq(spec, ",") {
		name, action, _ := strings.Cut(strings.TrimSpace(field), "=")
		m[name] = action
	}
	return m
}

// Hit stops the process at point name if it is armed. Unarmed, it costs a map length check.
func Hit(name string) {
	if len(armed) == 0 {
		return
	}
	action, ok := armed[name]
	if !ok {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s reached\n", name)
	switch action {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	default: // pause
		select {}
	}
}
