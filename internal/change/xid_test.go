package change

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestXID8Parts(t *testing.T) {
	x := MakeXID8(2, 106)
	if x != 8589934698 {
		t.Fatalf("MakeXID8(2, 106) = %d, want 8589934698", x)
	}
	if x.Epoch() != 2 || x.XID() != 106 {
		t.Fatalf("Epoch, XID = %d, %d, want 2, 106", x.Epoch(), x.XID())
	}
	if s := x.String(); s != "8589934698" {
		t.Fatalf("String() = %q", s)
	}
}

func TestWidenXID(t *testing.T) {
	tests := []struct {
		name string
		xid  uint32
		ref  XID8
		want XID8
		ok   bool
	}{
		{"same", 729, 729, 729, true},
		{"just before", 728, 729, 728, true},
		{"just after", 730, 729, 730, true},
		// Appendix A.3 of the research note: a wrapped cluster's snapshot 8589934698:8589934700:8589934698,
		// and the stream's COMMIT 106.
		{"epoch 2 from xmax", 106, 8589934700, 8589934698, true},
		{"epoch 1 before the wrap", 4294965296, 8589934700, 8589932592, true},
		{"ref just past a wrap, xid just before it", math.MaxUint32 - 1, MakeXID8(3, 5), MakeXID8(2, math.MaxUint32-1), true},
		{"ref just before a wrap, xid just past it", 5, MakeXID8(3, math.MaxUint32-1), MakeXID8(4, 5), true},
		{"furthest behind", 0, 1 << 31, 0, true},
		{"furthest ahead", 1<<31 - 1, 0, 1<<31 - 1, true},
		{"before epoch 0", math.MaxUint32, 5, 0, false},
		{"past the last epoch", 5, math.MaxUint64 - 2, 0, false},
		{"the last xid8", math.MaxUint32, math.MaxUint64 - 2, math.MaxUint64, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := WidenXID(tt.xid, tt.ref)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("WidenXID(%d, %d) = %d, %v, want %d, %v", tt.xid, tt.ref, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestWidenXIDNearest is the property: for every ref and every d in [-2^31, 2^31) that keeps
// ref+d a valid XID8, widening ref+d's low 32 bits against ref gives ref+d back. Run over
// random refs, with refs and distances at the edges weighted in.
func TestWidenXIDNearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	edges := []int64{-1 << 31, -1<<31 + 1, -1, 0, 1, 1<<31 - 1, 1<<31 - 2}
	for i := range 200000 {
		var ref XID8
		switch i % 4 {
		case 0:
			ref = XID8(rng.Uint64())
		case 1:
			ref = MakeXID8(rng.Uint32N(8), math.MaxUint32-rng.Uint32N(100)) // just before a wrap
		case 2:
			ref = MakeXID8(rng.Uint32N(8), rng.Uint32N(100)) // just after one
		default:
			ref = XID8(rng.Uint64N(1 << 33)) // epoch 0 and 1
		}
		d := rng.Int64N(1<<32) - 1<<31
		if i%5 == 0 {
			d = edges[rng.IntN(len(edges))]
		}
		want := int64(ref) + d // as the bits of a uint64
		inRange := !(d < 0 && uint64(-d) > uint64(ref)) && !(d > 0 && uint64(d) > math.MaxUint64-uint64(ref))
		got, ok := WidenXID(uint32(want), ref)
		if ok != inRange {
			t.Fatalf("WidenXID(%d, %d) ok = %v, want %v (d = %d)", uint32(want), ref, ok, inRange, d)
		}
		if ok && got != XID8(want) {
			t.Fatalf("WidenXID(%d, %d) = %d, want %d (d = %d)", uint32(want), ref, got, XID8(want), d)
		}
	}
}

// TestRawXIDsMisorder shows why xids are widened before they are compared: across a wrap the
// later transaction has the smaller 32-bit id.
func TestRawXIDsMisorder(t *testing.T) {
	before, after := MakeXID8(2, math.MaxUint32-10), MakeXID8(3, 10)
	if !(before < after) {
		t.Fatal("XID8 order is wrong across the wrap")
	}
	if before.XID() < after.XID() {
		t.Fatal("expected the raw 32-bit ids to misorder across the wrap")
	}
	w, ok := WidenXID(after.XID(), before)
	if !ok || w != after {
		t.Fatalf("WidenXID(%d, %d) = %d, %v, want %d", after.XID(), before, w, ok, after)
	}
}

func FuzzWidenXID(f *testing.F) {
	f.Add(uint32(106), uint64(8589934700))
	f.Add(uint32(math.MaxUint32), uint64(5))
	f.Add(uint32(0), uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, xid uint32, ref uint64) {
		got, ok := WidenXID(xid, XID8(ref))
		if !ok {
			return
		}
		if got.XID() != xid {
			t.Fatalf("WidenXID(%d, %d) = %d, whose low half is %d", xid, ref, got, got.XID())
		}
		var dist uint64
		if uint64(got) >= ref {
			dist = uint64(got) - ref
		} else {
			dist = ref - uint64(got)
		}
		if dist > 1<<31 || (dist == 1<<31 && uint64(got) > ref) {
			t.Fatalf("WidenXID(%d, %d) = %d, %d away: not the nearest", xid, ref, got, dist)
		}
	})
}
