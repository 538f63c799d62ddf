package handoff

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// recorder is a Sink that writes down what it receives: "xid" for a delivered transaction,
// "live@lsn" for Live.
type recorder struct {
	got  []string
	txns []*Txn[string]
}

func (r *recorder) Deliver(t *Txn[string]) {
	r.got = append(r.got, t.XID8.String())
	r.txns = append(r.txns, t)
}

func (r *recorder) Live(head change.LSN) { r.got = append(r.got, "live@"+head.String()) }

func (r *recorder) String() string { return strings.Join(r.got, " ") }

// tx builds an offered transaction with one item (or none, with empty set), ending 8 bytes
// after its commit LSN.
func tx(xid change.XID8, commit change.LSN, empty ...bool) *Txn[string] {
	t := &Txn[string]{XID8: xid, CommitLSN: commit, EndLSN: commit + 8, Bytes: 10}
	if len(empty) == 0 || !empty[0] {
		t.Items = []string{fmt.Sprintf("row of %d", xid)}
	}
	return t
}

func mustSnapshot(t testing.TB, text string, bound change.LSN) Snapshot {
	t.Helper()
	s, err := ParseSnapshot(text, bound)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantReason(t testing.TB, err error, want Reason) {
	t.Helper()
	if got, ok := ReasonOf(err); !ok || got != want {
		t.Fatalf("err = %v, want reason %s", err, want)
	}
}
