package handoff

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/internal/change"
)

// Snapshot is the read transaction's MVCC snapshot, as pg_current_snapshot() reports it, and
// the WAL insert position read after it was taken.
type Snapshot struct {
	// Xmin is the oldest transaction still running when the snapshot was taken: every one
	// before it had ended. Xmax is one past the newest that had ended: none from it on is
	// visible. Xmin <= Xmax.
	Xmin, Xmax change.XID8
	// XIP are the top-level transactions in [Xmin, Xmax) that were still running, ascending,
	// each once. pg_current_snapshot() lists no subtransactions, and a standby lists none at
	// all (see First).
	XIP []change.XID8
	// Bound is pg_current_wal_insert_lsn(), read in the same statement after the snapshot was
	// taken. A transaction commits its record before it becomes visible, so every transaction
	// the snapshot sees ends at or before Bound. The write position (pg_current_wal_lsn) is not
	// a bound: an asynchronous commit is visible before its record is written.
	Bound change.LSN
}

// Visible reports whether the snapshot sees the effects of committed transaction x: the rule
// of is_visible_fxid in Postgres's xid8funcs.c. It is asked only of committed transactions
// (aborted ones never reach the stream), for which "ended before the snapshot" and "visible"
// are the same.
func (s *Snapshot) Visible(x change.XID8) bool {
	switch {
	case x < s.Xmin:
		return true
	case x >= s.Xmax:
		return false
	}
	_, running := slices.BinarySearch(s.XIP, x)
	return !running
}

// Widen returns the XID8 a 32-bit xid names near the snapshot: within 2^31 of Xmax. It is
// for a caller that holds only the 32-bit id; see change.WidenXID, and ok there.
func (s *Snapshot) Widen(xid uint32) (change.XID8, bool) { return change.WidenXID(xid, s.Xmax) }

// String formats the snapshot as Postgres prints a pg_snapshot: "xmin:xmax:x1,x2". Bound is
// not part of it.
func (s *Snapshot) String() string {
	b := strconv.AppendUint(nil, uint64(s.Xmin), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(s.Xmax), 10)
	b = append(b, ':')
	for i, x := range s.XIP {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(x), 10)
	}
	return string(b)
}

// check reports what makes s a snapshot Postgres could not have taken.
func (s *Snapshot) check() error {
	if s.Xmin == 0 {
		return fmt.Errorf("xmin is 0, which is no transaction")
	}
	if s.Xmax < s.Xmin {
		return fmt.Errorf("xmax %d is before xmin %d", s.Xmax, s.Xmin)
	}
	for i, x := range s.XIP {
		if x < s.Xmin || x >= s.Xmax {
			return fmt.Errorf("running transaction %d is outside [xmin %d, xmax %d)", x, s.Xmin, s.Xmax)
		}
		if i > 0 && x <= s.XIP[i-1] {
			return fmt.Errorf("running transactions are not ascending at %d", x)
		}
	}
	return nil
}

// maxSnapshotText bounds what ParseSnapshot reads: a snapshot lists at most one running
// transaction per backend and prepared transaction, and 2 MB holds 100,000 of them.
const maxSnapshotText = 2 << 20

// ParseSnapshot reads pg_current_snapshot()::text, "xmin:xmax:x1,x2,...", with bound, the
// insert position read after it. It accepts what Postgres's pg_snapshot input accepts:
// decimal xid8s, 0 < xmin <= xmax, running transactions in [xmin, xmax), ascending; a
// transaction listed twice is kept once.
func ParseSnapshot(text string, bound change.LSN) (Snapshot, error) {
	bad := func(why string) (Snapshot, error) {
		shown := text
		if len(shown) > 64 {
			shown = shown[:64] + "..."
		}
		return Snapshot{}, fmt.Errorf("snapshot %q: %s; want xmin:xmax:xip as pg_current_snapshot() prints it", shown, why)
	}
	if len(text) > maxSnapshotText {
		return bad(fmt.Sprintf("longer than %d bytes", maxSnapshotText))
	}
	xmin, rest, ok := strings.Cut(text, ":")
	if !ok {
		return bad("no ':' after xmin")
	}
	xmax, list, ok := strings.Cut(rest, ":")
	if !ok {
		return bad("no ':' after xmax")
	}
	var s Snapshot
	var err error
	if s.Xmin, err = parseXID8(xmin); err != nil {
		return bad("xmin: " + err.Error())
	}
	if s.Xmax, err = parseXID8(xmax); err != nil {
		return bad("xmax: " + err.Error())
	}
	if list != "" {
		s.XIP = make([]change.XID8, 0, strings.Count(list, ",")+1)
		for item := range strings.SplitSeq(list, ",") {
			x, err := parseXID8(item)
			if err != nil {
				return bad("running transaction: " + err.Error())
			}
			if n := len(s.XIP); n > 0 && x == s.XIP[n-1] {
				continue
			}
			s.XIP = append(s.XIP, x)
		}
	}
	if err := s.check(); err != nil {
		return bad(err.Error())
	}
	s.Bound = bound
	return s, nil
}

// parseXID8 reads one unsigned decimal xid8: digits only, no sign, no spaces.
func parseXID8(s string) (change.XID8, error) {
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a decimal transaction id", s)
		}
		if v > (math.MaxUint64-uint64(c-'0'))/10 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		v = v*10 + uint64(c-'0')
	}
	return change.XID8(v), nil
}

// FirstStatement is the first statement of the snapshot's read transaction, run right after
// BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY. Being first, it fixes the transaction's
// snapshot, which pg_current_snapshot() then reports; the insert position is read after it,
// in the same statement, so it bounds every transaction the snapshot sees. The isolation level
// and recovery state are read with them because a snapshot outside REPEATABLE READ describes
// none of the later statements, and one on a standby omits the running transactions. Its
// four columns, as text and bool, fill a First.
const FirstStatement = `SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text, ` +
	`current_setting('transaction_isolation'), pg_is_in_recovery()`

// First is what FirstStatement returned.
type First struct {
	Snapshot   string // pg_current_snapshot()::text
	InsertLSN  string // pg_current_wal_insert_lsn()::text
	Isolation  string // current_setting('transaction_isolation')
	InRecovery bool   // pg_is_in_recovery()
}

// Check turns what the first statement returned into the snapshot, or refuses it with an
// *Error: snapshot_on_standby on a server in recovery, whose snapshot lists no running
// transaction (it keeps them all among the subtransactions, which pg_current_snapshot() does
// not print), so every transaction running at the snapshot would count as visible and be
// lost; snapshot_isolation outside REPEATABLE READ, where each later statement takes a new
// snapshot; snapshot_mismatch when the text cannot be read.
func (f First) Check() (Snapshot, error) {
	if f.InRecovery {
		return Snapshot{}, newError(ReasonOnStandby, AwaitSnapshot,
			"the snapshot connection reached a server in recovery (a standby), whose snapshots list no running transactions", nil)
	}
	if f.Isolation != "repeatable read" {
		return Snapshot{}, newError(ReasonIsolation, AwaitSnapshot,
			fmt.Sprintf("the read transaction runs at isolation level %q, not \"repeatable read\", so its statements do not share one snapshot", f.Isolation), nil)
	}
	bound, err := change.ParseLSN(f.InsertLSN)
	if err != nil {
		return Snapshot{}, newError(ReasonMismatch, AwaitSnapshot, "pg_current_wal_insert_lsn() answered "+strconv.Quote(f.InsertLSN), err)
	}
	s, err := ParseSnapshot(f.Snapshot, bound)
	if err != nil {
		return Snapshot{}, newError(ReasonMismatch, AwaitSnapshot, "pg_current_snapshot() could not be read", err)
	}
	return s, nil
}
