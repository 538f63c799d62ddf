package handoff

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/change"
)

func TestParseSnapshot(t *testing.T) {
	tests := []struct {
		text string
		want Snapshot
	}{
		{"729:729:", Snapshot{Xmin: 729, Xmax: 729, Bound: 7}},
		{"732:735:732", Snapshot{Xmin: 732, Xmax: 735, XIP: []change.XID8{732}, Bound: 7}},
		{"8589934698:8589934700:8589934698", Snapshot{Xmin: 8589934698, Xmax: 8589934700, XIP: []change.XID8{8589934698}, Bound: 7}},
		{"10:20:10,11,19", Snapshot{Xmin: 10, Xmax: 20, XIP: []change.XID8{10, 11, 19}, Bound: 7}},
		{"10:20:12,12,13", Snapshot{Xmin: 10, Xmax: 20, XIP: []change.XID8{12, 13}, Bound: 7}}, // pg_snapshot input keeps one of each
		{"1:18446744073709551615:", Snapshot{Xmin: 1, Xmax: 18446744073709551615, Bound: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, err := ParseSnapshot(tt.text, 7)
			if err != nil {
				t.Fatalf("ParseSnapshot(%q): %v", tt.text, err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b []change.XID8) bool { return slices.Equal(a, b) })); diff != "" {
				t.Fatalf("ParseSnapshot(%q) mismatch (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}

func TestParseSnapshotRejects(t *testing.T) {
	for _, bad := range []string{
		"", "729", "729:729", ":729:", "729::", "0:5:", "6:5:", "-1:5:", "+1:5:", " 1:5:", "1:5: 2",
		"1:5:5", "2:5:1", "1:5:3,2", "1:5:2,", "1:5:,2", "1:5:a", "1:18446744073709551616:", "1:5:2:3",
		"1:5:0x2",
	} {
		if s, err := ParseSnapshot(bad, 1); err == nil {
			t.Errorf("ParseSnapshot(%q) = %+v, want an error", bad, s)
		}
	}
	if _, err := ParseSnapshot("1:5:"+strings.Repeat("2,", maxSnapshotText), 1); err == nil {
		t.Error("ParseSnapshot of a text past maxSnapshotText succeeded")
	}
}

func TestVisible(t *testing.T) {
	tests := []struct {
		name string
		snap string
		xid  change.XID8
		want bool
	}{
		// Appendix A.1: T2 (728) is visible, T1 (729 = xmax, waiting on SyncRep) is not.
		{"before xmin", "729:729:", 728, true},
		{"at xmax", "729:729:", 729, false},
		{"past xmax", "729:729:", 800, false},
		{"running", "10:20:10,15", 15, false},
		{"running at xmin", "10:20:10,15", 10, false},
		{"ended between", "10:20:10,15", 12, true},
		{"ended just before xmax", "10:20:10,15", 19, true},
		// Appendix A.3: on a wrapped cluster the open transaction 106 is running.
		{"epoch 2 running", "8589934698:8589934700:8589934698", 8589934698, false},
		{"epoch 2 ended", "8589934698:8589934700:8589934698", 8589934699, true},
		{"epoch 1 ended", "8589934698:8589934700:8589934698", 8589932592, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSnapshot(tt.snap, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Visible(tt.xid); got != tt.want {
				t.Fatalf("Visible(%s) in %s = %v, want %v", tt.xid, tt.snap, got, tt.want)
			}
		})
	}
}

// TestRawXIDInXIP is Electric's server bug (research note §2.5-1) done on purpose: the stream's
// 32-bit xid compared with the snapshot's xid8s never matches once the epoch is past 0, so a
// running transaction reads as visible and would be dropped. Widened, it is running.
func TestRawXIDInXIP(t *testing.T) {
	s, err := ParseSnapshot("8589934698:8589934700:8589934698", 1)
	if err != nil {
		t.Fatal(err)
	}
	const streamed = 106 // COMMIT 106, as pgoutput sends it
	if !s.Visible(change.XID8(streamed)) {
		t.Fatal("expected the raw 32-bit xid to read as visible (below xmin): the bug this package avoids")
	}
	w, ok := s.Widen(streamed)
	if !ok || w != 8589934698 {
		t.Fatalf("Widen(106) = %d, %v, want 8589934698", w, ok)
	}
	if s.Visible(w) {
		t.Fatal("the widened xid reads as visible; it is running")
	}
}

// TestStandbySnapshot is Appendix A.2: a standby's snapshot of the same moment lists no running
// transaction, so 732, still running on the primary, would read as visible (and its changes be
// lost). First.Check refuses the standby.
func TestStandbySnapshot(t *testing.T) {
	primary, _ := ParseSnapshot("732:735:732", 1)
	standby, _ := ParseSnapshot("732:735:", 1)
	if primary.Visible(732) {
		t.Fatal("732 is running on the primary")
	}
	if !standby.Visible(732) {
		t.Fatal("expected the standby's snapshot to call 732 visible")
	}
	_, err := First{Snapshot: "732:735:", InsertLSN: "0/1526F58", Isolation: "repeatable read", InRecovery: true}.Check()
	if r, _ := ReasonOf(err); r != ReasonOnStandby {
		t.Fatalf("Check on a standby = %v, want %s", err, ReasonOnStandby)
	}
}

func TestFirstCheck(t *testing.T) {
	tests := []struct {
		name  string
		first First
		want  Reason // "" for success
	}{
		{"primary", First{"729:729:", "0/1526F58", "repeatable read", false}, ""},
		{"standby", First{"729:729:", "0/1526F58", "repeatable read", true}, ReasonOnStandby},
		{"read committed", First{"752:752:", "0/1526F58", "read committed", false}, ReasonIsolation},
		{"serializable", First{"752:752:", "0/1526F58", "serializable", false}, ReasonIsolation},
		{"bad lsn", First{"729:729:", "nope", "repeatable read", false}, ReasonMismatch},
		{"bad snapshot", First{"729:72:", "0/1526F58", "repeatable read", false}, ReasonMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.first.Check()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if s.Bound != 0x1526F58 || s.Xmax != 729 {
					t.Fatalf("Check = %+v", s)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Reason != tt.want {
				t.Fatalf("Check = %v, want reason %s", err, tt.want)
			}
			if e.Fix == "" || e.Phase != AwaitSnapshot {
				t.Fatalf("error lacks its fix or phase: %+v", e)
			}
		})
	}
}

func TestReasonsClosed(t *testing.T) {
	if len(Reasons) != len(reasonInfo) {
		t.Fatalf("Reasons lists %d, reasonInfo %d", len(Reasons), len(reasonInfo))
	}
	seen := map[Reason]bool{}
	for _, r := range Reasons {
		if !r.Valid() || r.Fix() == "" || seen[r] {
			t.Errorf("reason %q: valid %v, fix %q, listed twice %v", r, r.Valid(), r.Fix(), seen[r])
		}
		seen[r] = true
	}
	if Reason("nope").Valid() {
		t.Error(`Reason("nope") is valid`)
	}
	for _, r := range []Reason{ReasonTooLarge, ReasonOnStandby, ReasonIsolation, ReasonPolicyError} {
		if r.Retryable() {
			t.Errorf("%s is retryable; the same request cannot succeed", r)
		}
	}
}

func FuzzParseSnapshot(f *testing.F) {
	for _, s := range []string{"729:729:", "732:735:732", "10:20:10,11,19", "10:20:12,12,13", "1:5:", "0:0:", "1:2:3", "18446744073709551615:18446744073709551615:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSnapshot(text, 1)
		if err != nil {
			return
		}
		if err := s.check(); err != nil {
			t.Fatalf("ParseSnapshot(%q) = %+v, which fails its own check: %v", text, s, err)
		}
		// Its text form reads back as the same snapshot.
		back, err := ParseSnapshot(s.String(), 1)
		if err != nil {
			t.Fatalf("ParseSnapshot(%q) = %s, which does not parse back: %v", text, s.String(), err)
		}
		if back.Xmin != s.Xmin || back.Xmax != s.Xmax || !slices.Equal(back.XIP, s.XIP) {
			t.Fatalf("round trip of %q: %+v, then %+v", text, s, back)
		}
		// Visible agrees with a linear reading of the rule at the edges and at every listed id.
		probe := []change.XID8{s.Xmin, s.Xmax, s.Xmin - 1, s.Xmax - 1}
		probe = append(probe, s.XIP...)
		for _, x := range probe {
			want := x < s.Xmin || (x < s.Xmax && !slices.Contains(s.XIP, x))
			if got := s.Visible(x); got != want {
				t.Fatalf("Visible(%d) in %s = %v, want %v", x, s.String(), got, want)
			}
		}
	})
}
