package devpg

import (
	"fmt"

	"github.com/heraldrt/herald/internal/problem"
)

// Stage names the step of starting or stopping the server that failed. The same constant is
// the log attribute.
type Stage string

// The stages, in the order Start goes through them.
const (
	StageConfig Stage = "config"
	StageFind   Stage = "find"   // the server binaries and their version
	StageUser   Stage = "user"   // the unprivileged user the server runs as under root
	StageDir    Stage = "dir"    // the directory that holds the data, socket and log
	StageStale  Stage = "stale"  // a server a previous run left behind in the same directory
	StageInitdb Stage = "initdb" // creating the cluster
	StageStart  Stage = "start"  // pg_ctl start
	StageStop   Stage = "stop"   // pg_ctl stop, and removing the directory
)

// Error is a failure a person meets: what step failed, what exactly, and what to do about it.
// Detail may hold the output of initdb or the last lines of the server log; neither holds a
// secret, since the server trusts loopback and has no password.
type Error struct {
	Stage  Stage
	Detail string
	// Fix is the command or setting that resolves it.
	Fix string
	Err error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("devpg %s: %s", e.Stage, e.Detail)
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Problem is the failure as the person running herald dev meets it: code "devpg.<stage>".
func (e *Error) Problem() problem.Problem {
	return problem.Problem{Code: "devpg." + string(e.Stage), Stage: string(e.Stage), Detail: e.Detail, Fix: e.Fix}
}
