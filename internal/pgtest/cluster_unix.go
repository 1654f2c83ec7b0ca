//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// asServerUser returns what makes a command run as the user initdb and the server run as: this
// process's own, or, as root (which initdb refuses), the postgres user that the PostgreSQL
// package creates, to whom it gives dir.
func asServerUser(dir string) (func(*exec.Cmd) *exec.Cmd, error) {
	if os.Geteuid() != 0 {
		return func(cmd *exec.Cmd) *exec.Cmd { return cmd }, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres cluster: running as root needs the postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("postgres cluster: %w", err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return func(cmd *exec.Cmd) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}, nil
}
