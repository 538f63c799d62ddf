package handoff

import (
	"errors"
	"fmt"
)

// Reason says why a hand-off failed. The set is closed (Reasons); the same constant is the
// log attribute, the metric label and what the client is told. After any of them the
// subscription is not live and nothing of it was delivered past its rows; the client
// subscribes again (Retryable) or changes its request.
type Reason string

// The reasons a hand-off fails.
const (
	// ReasonBusy: too many snapshots are being read; the request waited its turn and was
	// refused.
	ReasonBusy Reason = "snapshot_busy"
	// ReasonTimeout: the snapshot's read transaction, or its first row, took longer than
	// allowed. The bound caps how long the transaction holds back VACUUM.
	ReasonTimeout Reason = "snapshot_timeout"
	// ReasonTooLarge: more rows match than a snapshot may carry.
	ReasonTooLarge Reason = "snapshot_too_large"
	// ReasonBufferFull: the changes held for the subscription while its rows were read
	// (Config.EarlyBytes, Config.PendingBytes) outgrew their bound.
	ReasonBufferFull Reason = "handoff_buffer_full"
	// ReasonOnStandby: the snapshot was taken on a server in recovery, whose snapshot omits
	// the running transactions (see First.Check).
	ReasonOnStandby Reason = "snapshot_on_standby"
	// ReasonIsolation: the read transaction did not run at REPEATABLE READ, so its statements
	// did not share the snapshot it reported.
	ReasonIsolation Reason = "snapshot_isolation"
	// ReasonMismatch: the snapshot contradicts the stream: a transaction it sees ends past
	// its Bound, or what Postgres reported could not be read. The snapshot came from another
	// server than the stream (a standby, or a primary after failover), or a transaction id was
	// widened wrongly. Never guessed around.
	ReasonMismatch Reason = "snapshot_mismatch"
	// ReasonSchemaChanged: the table's columns changed while its rows were read.
	ReasonSchemaChanged Reason = "schema_changed"
	// ReasonReplicationRestarted: the replication stream restarted (or went back) while the
	// hand-off waited on it, so what it offered can no longer be told complete.
	ReasonReplicationRestarted Reason = "replication_restarted"
	// ReasonTableNotReady: the table was added to the publication so recently that
	// transactions which began before may still write to it unseen by the stream.
	ReasonTableNotReady Reason = "table_not_ready"
	// ReasonPolicyError: the row rule failed on a row of the snapshot; the subscribe fails
	// rather than hide the row silently.
	ReasonPolicyError Reason = "policy_error"
	// ReasonSyncStandbyStalled: a transaction has waited for a synchronous standby longer
	// than the look-back, so it may have been streamed before the subscription and still be
	// invisible to its snapshot: in neither.
	ReasonSyncStandbyStalled Reason = "sync_standby_stalled"
)

// Reasons is the closed set, in a fixed order.
var Reasons = []Reason{
	ReasonBusy, ReasonTimeout, ReasonTooLarge, ReasonBufferFull, ReasonOnStandby, ReasonIsolation,
	ReasonMismatch, ReasonSchemaChanged, ReasonReplicationRestarted, ReasonTableNotReady,
	ReasonPolicyError, ReasonSyncStandbyStalled,
}

// reasonInfo is what a person meeting a reason should do, and whether subscribing again
// unchanged may succeed.
var reasonInfo = map[Reason]struct {
	fix   string
	retry bool
}{
	ReasonBusy:                 {"retry with backoff; if it persists, raise handoff.max_concurrent or handoff.queue_wait", true},
	ReasonTimeout:              {"retry with backoff; if it persists, narrow the filter or raise handoff.timeout", true},
	ReasonTooLarge:             {"narrow the filter or the columns, or raise handoff.max_rows and handoff.max_bytes", false},
	ReasonBufferFull:           {"retry with backoff; if it persists, raise handoff.pending_bytes and handoff.early_bytes", true},
	ReasonOnStandby:            {"point the database URL at the primary that holds the replication slot, not a standby", false},
	ReasonIsolation:            {"reach the database directly or through a pooler that keeps a transaction on one connection (session or transaction mode)", false},
	ReasonMismatch:             {"make the snapshot connection and the replication connection reach the same primary; then retry", true},
	ReasonSchemaChanged:        {"subscribe again: the table's columns changed while its rows were read", true},
	ReasonReplicationRestarted: {"subscribe again", true},
	ReasonTableNotReady:        {"retry shortly: transactions that began before the table joined the publication are still running", true},
	ReasonPolicyError:          {"fix the table's row rule (the server log names the rule), then subscribe again", false},
	ReasonSyncStandbyStalled:   {"restore the synchronous standby (synchronous_standby_names), or raise handoff.lookback", true},
}

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool {
	_, ok := reasonInfo[r]
	return ok
}

// Retryable reports whether the same subscribe may succeed later, with no change of request
// or configuration.
func (r Reason) Retryable() bool { return reasonInfo[r].retry }

// Fix says what to do about r: a config key or an action.
func (r Reason) Fix() string { return reasonInfo[r].fix }

// Error is a failed hand-off.
type Error struct {
	Reason Reason
	// Phase is the phase the hand-off was in when it failed.
	Phase Phase
	// Detail says what was seen. It names positions and transaction ids, never row values.
	Detail string
	// Fix is what to do: Reason.Fix.
	Fix string
	Err error // the cause, if any
}

func newError(r Reason, p Phase, detail string, err error) *Error {
	return &Error{Reason: r, Phase: p, Detail: detail, Fix: r.Fix(), Err: err}
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("handoff: %s while %s: %s", e.Reason, e.Phase.doing(), e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Fix != "" {
		msg += " (" + e.Fix + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the reason of a hand-off failure anywhere in err's chain.
func ReasonOf(err error) (Reason, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason, true
	}
	return "", false
}
