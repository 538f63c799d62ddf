package snapshot

import (
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

// arena hands out the JSON bytes and the column slices of a read's rows in chunks, so a row
// costs no allocation of its own. A chunk is replaced when full, never grown in place, so the
// rows already handed out keep their bytes; a row holds its chunk alive, and so a chunk lives
// as long as the Sink keeps any row of it. Owned by the read's goroutine.
type arena struct {
	buf  []byte
	cols []change.Column
}

const (
	arenaBytes   = 64 << 10
	arenaColumns = 1024
)

// row converts one row's text values (nil for NULL) into a row of cols, each value by its
// column's type OID with pgvalue, as the changefeed converts what pgoutput sends.
func (a *arena) row(cols []Column, raw [][]byte) change.Row {
	need := 0
	for _, v := range raw {
		need += len(v) + 8
	}
	if cap(a.buf)-len(a.buf) < need {
		a.buf = make([]byte, 0, max(arenaBytes, need))
	}
	n := len(cols)
	if cap(a.cols)-len(a.cols) < n {
		a.cols = make([]change.Column, 0, max(arenaColumns, n))
	}
	at := len(a.cols)
	a.cols = a.cols[:at+n]
	row := change.Row(a.cols[at : at+n : at+n])
	for i, c := range cols {
		start := len(a.buf)
		if raw[i] == nil {
			a.buf = append(a.buf, "null"...)
		} else {
			// A value that outgrows the room left (escapes) moves the chunk; the values before
			// it keep the old one.
			a.buf = pgvalue.AppendJSON(a.buf, c.OID, raw[i])
		}
		row[i] = change.Column{Name: c.Name, Value: a.buf[start:len(a.buf):len(a.buf)]}
	}
	return row
}
