//go:build !unix

package devpg

import (
	"os"
	"os/exec"
)

// Only unix systems run a server as another user; elsewhere unprivileged returns nil.
func (a *account) apply(cmd *exec.Cmd)           {}
func (a *account) canSearch(fi os.FileInfo) bool { return true }

// running cannot tell a live postmaster from a stale pid file here, so it trusts pg_ctl.
func running(pid int, data string) bool { return false }

func kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	return p.Kill()
}
