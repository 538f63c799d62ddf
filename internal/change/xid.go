package change

import "strconv"

// XID8 is a transaction id with its epoch in the high 32 bits, as pg_current_xact_id() and
// pg_current_snapshot() report it. Unlike a 32-bit xid it never wraps around, so two of them
// compare as plain integers; two 32-bit xids do not (Postgres compares those modulo 2^32, and
// a raw comparison is wrong for half the pairs once the counter has wrapped). Compare
// transactions only as XID8.
type XID8 uint64

// MakeXID8 returns the XID8 of a 32-bit xid in epoch epoch.
func MakeXID8(epoch, xid uint32) XID8 { return XID8(uint64(epoch)<<32 | uint64(xid)) }

// Epoch returns how many times the 32-bit counter had wrapped when x was assigned.
func (x XID8) Epoch() uint32 { return uint32(x >> 32) }

// XID returns the 32-bit xid pgoutput and the catalogs carry for x.
func (x XID8) XID() uint32 { return uint32(x) }

// String prints x in decimal, as Postgres prints an xid8.
func (x XID8) String() string { return strconv.FormatUint(uint64(x), 10) }

// WidenXID returns the XID8 whose low 32 bits are xid and which lies within 2^31 of ref: the
// one transaction a 32-bit xid can name near a known XID8 (the xmax of a snapshot, or the last
// transaction widened). It is unique because Postgres keeps every xid still in use within 2^31
// of the next one to be assigned (wraparound protection stops assigning otherwise), and it is
// the arithmetic of widen_snapshot_xid in Postgres's xid8funcs.c, in signed form.
//
// ok is false when the answer would lie before epoch 0 or past the last epoch: no transaction
// has such an id, so the xid and ref cannot both be right (a corrupt message, or a reference
// from another server), and the caller must not guess.
func WidenXID(xid uint32, ref XID8) (x XID8, ok bool) {
	d := int32(xid - uint32(ref)) // xid's distance from ref's low half, in [-2^31, 2^31)
	if d < 0 {
		back := uint64(-int64(d))
		if back > uint64(ref) {
			return 0, false
		}
		return ref - XID8(back), true
	}
	if uint64(d) > ^uint64(ref) {
		return 0, false
	}
	return ref + XID8(d), true
}
