package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldrt/herald/client"
)

// reported keeps what a check reported, so the checks' own test can tell that they fail.
type reported struct{ errs []string }

func (r *reported) Helper()                      {}
func (r *reported) Logf(string, ...any)          {}
func (r *reported) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }

// TestClusterChecks runs the many-nodes tests' checks on made-up streams: each accepts what the
// protocol allows and reports what it does not. It needs no server.
func TestClusterChecks(t *testing.T) {
	t.Run("channel", func(t *testing.T) {
		l := newLedger()
		for i := 1; i <= 4; i++ {
			l.note("p", fmt.Sprintf("k%d", i), client.Position{Epoch: "E", Offset: uint64(i)}, nil)
		}
		l.note("p", "k5", client.Position{Epoch: "F", Offset: 1}, nil)
		l.note("p", "k6", client.Position{}, fmt.Errorf("HTTP 503"))
		msg := func(k, epoch string, o uint64) client.Frame {
			return &client.Message{Sub: "c", Pos: client.Position{Epoch: epoch, Offset: o}, Data: keyData(k)}
		}
		m1, m2, m3, m4, m5 := msg("k1", "E", 1), msg("k2", "E", 2), msg("k3", "E", 3), msg("k4", "E", 4), msg("k5", "F", 1)
		gap := &client.Resync{Sub: "c", Reason: "upstream_gap", Last: client.Position{Epoch: "E", Offset: 2}}
		for _, c := range []struct {
			name   string
			frames []client.Frame
			fault  string // in the report; empty: none
		}{
			{"every publication once, in order", []client.Frame{m1, m2, m3, m4, gap, m5}, ""},
			{"a resync where one is missing", []client.Frame{m1, gap, m3, m4, gap, m5}, ""},
			{"a publication whose publish failed may arrive", []client.Frame{m1, m2, m3, m4, gap, m5, msg("k6", "F", 2)}, ""},
			{"two publications at one position", []client.Frame{m1, m2, m3, m4, gap, msg("k6", "F", 1)}, "two publications at one position"},
			{"an older epoch after a newer", []client.Frame{m1, m2, m3, gap, m5, gap, m4}, "must grow"},
			{"one missing with no resync", []client.Frame{m1, m3, m4, gap, m5}, "silent loss"},
			{"the resync elsewhere", []client.Frame{m1, m3, gap, m4, m5}, "silent loss"},
			{"twice", []client.Frame{m1, m2, m2, m3, m4, gap, m5}, "twice"},
			{"out of order", []client.Frame{m1, m3, m2, m4, gap, m5}, "must grow"},
			{"at another position", []client.Frame{m1, msg("k2", "E", 7), m3, m4, gap, m5}, "disagree"},
			{"never published", []client.Frame{m1, m2, m3, m4, gap, m5, msg("k9", "F", 2)}, "never published"},
			{"a new epoch with no resync", []client.Frame{m1, m2, m3, m4, m5}, "no resync between"},
			{"the last missing, a resync at the end", []client.Frame{m1, m2, m3, gap, m5}, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := &reported{}
				checkChannel(r, "s", c.frames, l)
				judge(t, r, c.fault)
			})
		}
	})
	t.Run("rows", func(t *testing.T) {
		pos := func(i int) client.Position {
			p, err := client.ParsePosition(fmt.Sprintf("0/%X.1", 0x1000*i))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		row := func(id, at int) got { return got{pos: pos(at), id: id} }
		gap := func(last int) got {
			r := &client.Resync{Sub: "items", Reason: "upstream_gap", Last: pos(last)}
			return got{pos: r.Last, resync: r}
		}
		for _, c := range []struct {
			name   string
			frames []got
			fault  string
		}{
			{"every row once", []got{row(1, 1), row(2, 2), row(3, 3), row(4, 4)}, ""},
			{"a replay at the same positions", []got{row(1, 1), row(2, 2), row(3, 3), row(2, 2), row(3, 3), row(4, 4)}, ""},
			{"a resync where rows are missing", []got{row(1, 1), gap(3), row(4, 4)}, ""},
			{"a duplicate at a new position", []got{row(1, 1), row(2, 2), row(3, 3), row(2, 5), row(4, 6)}, "duplicate"},
			{"a replay at another position", []got{row(1, 1), row(2, 2), row(3, 3), row(3, 2), row(4, 4)}, "not a replay"},
			{"rows missing with no resync", []got{row(1, 1), row(2, 2), row(4, 4)}, "no resync"},
			{"a row from inside a reported range", []got{row(1, 1), gap(3), row(3, 3), row(4, 4)}, "not a replay"},
			{"the last rows never arrive", []got{row(1, 1), row(2, 2)}, "want 4"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := &reported{}
				checkRows(r, "s", c.frames, 4)
				judge(t, r, c.fault)
			})
		}
	})
}

func judge(t *testing.T, r *reported, fault string) {
	t.Helper()
	switch {
	case fault == "" && len(r.errs) > 0:
		t.Errorf("reported %q, want nothing", r.errs)
	case fault != "" && !strings.Contains(strings.Join(r.errs, "\n"), fault):
		t.Errorf("reported %q, want %q among it", r.errs, fault)
	}
}
