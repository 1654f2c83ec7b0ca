//go:build !unix

package pgtest

import "os/exec"

// asServerUser runs initdb and the server as this process's user.
func asServerUser(string) (func(*exec.Cmd) *exec.Cmd, error) {
	return func(cmd *exec.Cmd) *exec.Cmd { return cmd }, nil
}
