//go:build unix

package devpg

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// apply makes cmd run as the account, with no supplementary groups, as `setpriv --clear-groups`
// does in scripts/testenv.
func (a *account) apply(cmd *exec.Cmd) {
	if a == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}},
	}
}

// canSearch reports whether the account may traverse the directory fi describes. The account
// has no supplementary groups (see apply), so only its primary group counts.
func (a *account) canSearch(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == a.uid:
		return perm&0o100 != 0
	case st.Gid == a.gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// running reports whether pid is a live postmaster of the cluster in data. A pid read from a
// stale postmaster.pid may since have been reused by an unrelated process, so on Linux the
// process must also have data as its working directory, where the postmaster moves at start.
// A zombie is not running: it holds its pid until its parent reaps it, but no port.
func running(pid int, data string) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	proc := "/proc/" + strconv.Itoa(pid)
	if stat, err := os.ReadFile(proc + "/stat"); err == nil {
		// The state follows the parenthesised command name, which may itself hold ") ".
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i:]), ") Z") {
			return false
		}
	}
	cwd, err := os.Readlink(proc + "/cwd")
	if err != nil {
		// No /proc (macOS), or not ours to read: the signal check is all there is.
		return true
	}
	want := data
	if real, err := filepath.EvalSymlinks(data); err == nil {
		want = real
	}
	return cwd == want || cwd == data
}

// kill ends pid at once. Its backends notice their postmaster's death and exit on their own.
func kill(pid int) error {
	err := syscall.Kill(pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
