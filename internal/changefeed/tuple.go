package changefeed

import (
	"encoding/binary"
	"fmt"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

// Row changes (Insert, Update, Delete) are the bulk of a stream, so they are decoded here,
// straight from the message bytes into rows backed by a per-transaction arena, rather than
// through pglogrepl, which copies every column into a slice of its own first. checkTuples has
// already walked every length against the message, so nothing below reads out of bounds.

// arena hands out the JSON bytes and the column slices of one transaction's rows in chunks,
// so a row costs no allocation of its own. Rows keep their chunk alive; a full chunk is
// replaced, never grown, so earlier rows stay valid. Chunks start small and double, so a
// one-row transaction pays for one row, and a bulk one for a few dozen chunks.
type arena struct {
	buf       []byte
	cols      []change.Column
	nextBytes int
	nextCols  int
}

const (
	arenaMinBytes   = 512
	arenaMaxBytes   = 64 << 10
	arenaMinColumns = 16
	arenaMaxColumns = 2048
)

// bytes returns a buffer with room for at least n more bytes.
func (a *arena) bytes(n int) []byte {
	if cap(a.buf)-len(a.buf) < n {
		a.nextBytes = min(max(2*a.nextBytes, arenaMinBytes), arenaMaxBytes)
		a.buf = make([]byte, 0, max(a.nextBytes, n))
	}
	return a.buf
}

// columns returns an empty row with capacity for n columns.
func (a *arena) columns(n int) change.Row {
	if cap(a.cols)-len(a.cols) < n {
		a.nextCols = min(max(2*a.nextCols, arenaMinColumns), arenaMaxColumns)
		a.cols = make([]change.Column, 0, max(a.nextCols, n))
	}
	return a.cols[len(a.cols) : len(a.cols) : len(a.cols)+n]
}

// take records that row's columns and the bytes up to buf's length are used.
func (a *arena) take(row change.Row, buf []byte) {
	a.cols = a.cols[:len(a.cols)+len(row)]
	a.buf = buf
}

// tupleTextBytes sums the text lengths of the n columns at the start of b.
func tupleTextBytes(b []byte, n int) int {
	total := 0
	for i := 0; i < n && len(b) > 0; i++ {
		k := b[0]
		b = b[1:]
		if k == 't' || k == 'b' {
			l := int(binary.BigEndian.Uint32(b))
			total += l
			b = b[4+l:]
		}
	}
	return total
}

// decodeTuple reads one TupleData from b into a row of relation r, and returns the rest of b.
// In a key tuple, 'n' marks a column outside the replica identity, which is left out; in a
// new tuple, 'u' marks an unchanged TOAST value, returned in omitted.
func (d *decoder) decodeTuple(r *relation, b []byte, kind tupleKind, ar *arena) (row change.Row, omitted []string, rest []byte, err error) {
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if n != len(r.cols) {
		return nil, nil, nil, fmt.Errorf("table %s: tuple has %d columns but its Relation message has %d", r.table, n, len(r.cols))
	}
	// Room for the row's text and the JSON around it; a value that needs more (escapes) gets
	// a fresh chunk below.
	buf := ar.bytes(tupleTextBytes(b, n) + 8*n)
	row = ar.columns(n)
	for i := 0; i < n; i++ {
		k := b[0]
		b = b[1:]
		col := r.cols[i]
		switch k {
		case 'n':
			if kind == tupleKey && !col.key {
				continue
			}
			start := len(buf)
			buf = append(buf, "null"...)
			row = append(row, change.Column{Name: col.name, Value: buf[start:len(buf):len(buf)]})
		case 'u':
			if kind == tupleNew {
				omitted = append(omitted, col.name)
			}
		case 't':
			l := int(binary.BigEndian.Uint32(b))
			text := b[4 : 4+l]
			b = b[4+l:]
			if kind == tupleKey && !col.key {
				continue
			}
			if cap(buf)-len(buf) < 8*l+16 {
				// A value larger than the chunk's room: the row's earlier values stay where they
				// are; this one and the rest go to a fresh chunk.
				ar.take(nil, buf)
				buf = ar.bytes(8*l + 16)
			}
			start := len(buf)
			buf = pgvalue.AppendJSON(buf, col.oid, text)
			row = append(row, change.Column{Name: col.name, Value: buf[start:len(buf):len(buf)]})
		case 'b':
			return nil, nil, nil, fmt.Errorf("table %s column %s: binary tuple data, but the stream asked for text", r.table, col.name)
		default:
			return nil, nil, nil, fmt.Errorf("table %s column %s: unknown tuple data kind %q", r.table, col.name, k)
		}
	}
	ar.take(row, buf)
	return row, omitted, b, nil
}

// rowChange decodes an Insert, Update or Delete message. checkTuples must have passed.
func (a *assembler) rowChange(data []byte) error {
	kind := data[0]
	b := data[1:]
	var xid uint32
	if a.inStream {
		xid = binary.BigEndian.Uint32(b)
		b = b[4:]
	}
	relID := binary.BigEndian.Uint32(b)
	b = b[4:]
	return a.change(xid, relID, func(r *relation, ar *arena) (change.Event, error) {
		var (
			ev      change.Event
			old     change.Row
			oldKind = tupleOld
			haveOld bool
			err     error
		)
		if len(b) == 0 {
			return ev, fmt.Errorf("%q message without a tuple", kind)
		}
		if b[0] == 'K' || b[0] == 'O' {
			if b[0] == 'K' {
				oldKind = tupleKey
			}
			old, _, b, err = a.dec.decodeTuple(r, b[1:], oldKind, ar)
			if err != nil {
				return ev, err
			}
			haveOld = true
		}
		switch kind {
		case 'I':
			ev.Op = change.Insert
		case 'U':
			ev.Op = change.Update
		case 'D':
			ev.Op = change.Delete
		}
		if kind != 'D' {
			if len(b) == 0 || b[0] != 'N' {
				return ev, fmt.Errorf("%q message: expected the new tuple", kind)
			}
			var omitted []string
			ev.After, omitted, _, err = a.dec.decodeTuple(r, b[1:], tupleNew, ar)
			if err != nil {
				return ev, err
			}
			if len(omitted) > 0 && haveOld && oldKind == tupleOld {
				ev.After, omitted = fillFromOld(ev.After, omitted, old, r)
			}
			ev.Omitted = omitted
		} else if !haveOld {
			return ev, fmt.Errorf("delete message without an old tuple")
		}
		ev.Before = old
		ev.BeforeKeyOnly = haveOld && oldKind == tupleKey
		ev.Key = r.key
		ev.Tenant = a.dec.tenantOf(r, ev.After, ev.Before)
		return ev, nil
	})
}
