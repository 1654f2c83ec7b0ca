package proc

import (
	"os/exec"
	"syscall"
)

// leash has the kernel SIGKILL cmd's process when the process that started it dies, however it
// dies: a test binary killed by its -timeout, or by a mutation tool's, runs no cleanup, and
// without this its dev servers, workers and fakepays would run on with nobody to stop them.
//
// The signal follows the thread that forked the child, not the whole process; Go ends a thread
// only when a goroutine locked to it returns, which nothing that starts processes here does.
func leash(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
