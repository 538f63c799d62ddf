package changefeed

import (
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/problem"

	"github.com/jackc/pgx/v5/pgconn"
)

// Stage names the step of the changefeed that failed. The same constant is the log attribute
// and the metric label.
type Stage string

// The stages, in the order a stream goes through them.
const (
	StageConfig      Stage = "config"
	StageConnect     Stage = "connect"
	StageLeader      Stage = "leader"
	StagePreflight   Stage = "preflight"
	StagePublication Stage = "publication"
	StageSlot        Stage = "slot"
	StageStream      Stage = "stream"
	StageDecode      Stage = "decode"
	StageSink        Stage = "sink"
	StageConfirm     Stage = "confirm"
)

// Error is a failure a person meets: what step failed, what exactly, and what to do about it.
// Detail never holds a password or any other secret.
type Error struct {
	Stage  Stage
	Detail string
	// Fix is the SQL, command or config key that resolves it.
	Fix string
	// Permanent errors are not retried by the supervisor: retrying cannot help until a person
	// acts (a lost slot, a missing privilege, a wrong setting).
	Permanent bool
	Err       error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s", e.Stage, e.Detail)
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// IsPermanent reports whether err is a changefeed error that retrying cannot fix.
func IsPermanent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Permanent
}

// pgError turns an error from Postgres into an Error with a fix, by SQLSTATE where one is
// known. The server's message is safe to show: Postgres never echoes a password.
func pgError(stage Stage, op string, err error) *Error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return &Error{Stage: stage, Detail: op + ": " + safeNetError(err), Fix: "check that Postgres is up and reachable from this host at the database URL's host and port", Err: err}
	}
	e := &Error{Stage: stage, Detail: fmt.Sprintf("%s: %s (SQLSTATE %s)", op, pe.Message, pe.Code), Err: err}
	switch pe.Code {
	case "28000", "28P01":
		e.Fix = "check the user and password in the database URL, and that pg_hba.conf has a `host <db> <user> <addr> scram-sha-256` line for this host (a replication=database connection matches database lines)"
		e.Permanent = true
	case "3D000":
		e.Fix = "create the database, or correct its name in the database URL"
		e.Permanent = true
	case "42501":
		e.Fix = "grant the missing privilege named above to the role in the database URL"
		e.Permanent = true
	case "53300":
		e.Fix = "raise max_wal_senders (and max_connections) in postgresql.conf and restart Postgres, or stop an idle replication client"
	case "53400":
		e.Fix = "raise max_replication_slots in postgresql.conf and restart Postgres, or drop an unused slot: SELECT pg_drop_replication_slot('<name>')"
	case "55006":
		e.Fix = "another client is streaming from this slot; stop it, or give Herald its own slot name (changefeed.slot)"
	case "55000":
		e.Fix = "the Postgres message above names the object, and the state it is in that Postgres refuses"
	default:
		e.Fix = "the Postgres message above names what to change"
	}
	return e
}

// safeNetError renders a connection error without the connection string, which pgconn puts in
// some messages along with the user name.
func safeNetError(err error) string {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if inner := errors.Unwrap(ce); inner != nil {
			return inner.Error()
		}
		return "could not connect"
	}
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		return "the database URL could not be parsed"
	}
	return err.Error()
}

// Problem is the error as an operator meets it: code "changefeed.<stage>", and
// "changefeed.<stage>.permanent" when retrying cannot help until a person acts.
func (e *Error) Problem() problem.Problem {
	code := "changefeed." + string(e.Stage)
	if e.Permanent {
		code += ".permanent"
	}
	return problem.Problem{Code: code, Stage: string(e.Stage), Detail: e.Detail, Fix: e.Fix}
}
