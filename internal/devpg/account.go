package devpg

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// account is the unprivileged user initdb, pg_ctl and postgres run as when Herald runs as root,
// since both initdb and postgres refuse to run as root. A nil *account means "as ourselves".
type account struct {
	name     string
	uid, gid uint32
}

// unprivileged returns the account to run the server as: nil when not root, else the postgres
// user if it exists, else nobody.
func unprivileged() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, &Error{Stage: StageUser,
		Detail: "running as root, and neither a postgres nor a nobody user exists to run the server as (initdb and postgres refuse to run as root)",
		Fix:    "run herald dev as an ordinary user, or create one for the server: useradd --system --user-group postgres",
	}
}

func (a *account) String() string {
	if a == nil {
		return "the current user"
	}
	return fmt.Sprintf("%s (uid %d)", a.name, a.uid)
}

// chown gives path to the account; as ourselves it does nothing.
func (a *account) chown(path string) error {
	if a == nil {
		return nil
	}
	return os.Chown(path, int(a.uid), int(a.gid))
}

// checkReach reports, as an *Error, the first directory on the way to dir (dir included) that
// the account cannot search. Under root the server runs as another user, and a data directory
// under a 0700 home or t.TempDir() is out of its reach; initdb would say only "Permission
// denied".
func checkReach(dir string, a *account) error {
	if a == nil {
		return nil
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return &Error{Stage: StageDir, Detail: fmt.Sprintf("stat %s: %v", p, err), Fix: "choose a directory under /tmp", Err: err}
		}
		if !a.canSearch(fi) {
			return &Error{Stage: StageDir,
				Detail: fmt.Sprintf("the server runs as %s, which cannot reach %s: %s is mode %s", a, dir, p, fi.Mode().Perm()),
				Fix:    fmt.Sprintf("chmod o+x %s, or choose a directory under /tmp", p),
			}
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}
