//go:build tempotent_failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
)

// armed is read once, at start-up: a test arms points by starting the process with EnvVar set.
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
		// os.Process.Kill is SIGKILL on unix and TerminateProcess on Windows: the process
		// ends without running deferred functions, as in a crash.
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Kill()
		}
		select {}
	default: // pause
		select {}
	}
}
