// Package change defines the value Herald's pipeline carries: one committed row change decoded
// from Postgres, with the stream position it was committed at. It is a leaf: stdlib only, no
// I/O, and every other package may import it.
package change

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LSN is a position in the Postgres write-ahead log. It prints the way Postgres does, as two
// hexadecimal halves: 16/B374D848.
type LSN uint64

// String formats the LSN as Postgres does.
func (l LSN) String() string {
	var b [17]byte
	return string(appendLSN(b[:0], l))
}

// ParseLSN reads the Postgres text form of an LSN ("16/B374D848").
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("lsn %q: want two hexadecimal halves like 16/B374D848", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: want two hexadecimal halves like 16/B374D848", s)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: want two hexadecimal halves like 16/B374D848", s)
	}
	return LSN(h<<32 | l), nil
}

// MarshalText implements encoding.TextMarshaler, so an LSN is a JSON string.
func (l LSN) MarshalText() ([]byte, error) { return appendLSN(nil, l), nil }

// AppendText appends the text form of l to dst.
func (l LSN) AppendText(dst []byte) ([]byte, error) { return appendLSN(dst, l), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := ParseLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Op is what a change did to its table.
type Op string

// The closed set of operations.
const (
	Insert   Op = "insert"
	Update   Op = "update"
	Delete   Op = "delete"
	Truncate Op = "truncate" // rowless: the whole table was cleared
	Message  Op = "message"  // a logical decoding message (pg_logical_emit_message)
)

// Column is one column of a row image: its name and its value as JSON.
type Column struct {
	Name  string
	Value json.RawMessage // never nil: SQL NULL is the JSON literal null
}

// Row is a row image in the column order of its relation. A nil Row means the image is absent,
// which is not the same as a row of nulls.
type Row []Column

// Get returns the named column's value. ok is false when the column is not in the image, which
// is how an omitted (TOAST-unchanged) or key-only column reads.
func (r Row) Get(name string) (v json.RawMessage, ok bool) {
	for i := range r {
		if r[i].Name == name {
			return r[i].Value, true
		}
	}
	return nil, false
}

// MarshalJSON writes the row as one JSON object, keys in column order.
func (r Row) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	return r.AppendJSON(nil), nil
}

// AppendJSON appends the row as a JSON object to dst.
func (r Row) AppendJSON(dst []byte) []byte {
	if r == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '{')
	for i, c := range r {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, c.Name)
		dst = append(dst, ':')
		if len(c.Value) == 0 {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, c.Value...)
		}
	}
	return append(dst, '}')
}

// UnmarshalJSON reads a JSON object into a Row, keeping the object's key order.
func (r *Row) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*r = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("row: want a JSON object")
	}
	out := Row{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		out = append(out, Column{Name: name, Value: v})
	}
	*r = out
	return nil
}

// Event is one committed change. Every event of one transaction carries that transaction's
// commit LSN, txid, commit time and write tag, and the events of a transaction are handed on
// together, in the order the transaction made them.
type Event struct {
	Table  string `json:"table,omitempty"` // schema-qualified: "public.items"; empty for a Message
	Op     Op     `json:"op"`
	Before Row    `json:"before"` // the old image, where Postgres sent one (see below)
	After  Row    `json:"after"`  // the new image; nil for delete and truncate
	// Omitted names the columns the new image left out because Postgres did not log them: an
	// out-of-line (TOAST) value the UPDATE did not touch. They are absent from After, never null.
	// A column the old image could fill (REPLICA IDENTITY FULL) is filled and not listed.
	Omitted []string `json:"omitted,omitempty"`
	// BeforeKeyOnly is true when Before holds only the replica identity's key columns (identity
	// DEFAULT or INDEX), so a column missing from it is unknown, not null.
	BeforeKeyOnly bool `json:"before_key_only,omitempty"`
	// Key names the columns of the table's replica identity, in table order: the columns an
	// old image carries (every column under REPLICA IDENTITY FULL). An UPDATE that kept them
	// all comes without an old image, since its old key equals its new one; Key is how a
	// consumer knows which of the new image's columns that old key is. Shared by every event
	// of one relation: never modify it.
	Key []string `json:"-"`

	LSN LSN `json:"lsn"` // the transaction's commit LSN: its position in the stream
	// TxID and CommitTime are the transaction's id and commit time. A Message sent outside any
	// transaction has neither: both are zero, and absent from the JSON.
	TxID       uint32    `json:"txid,omitzero"`
	CommitTime time.Time `json:"commit_time,omitzero"`
	Tenant     string    `json:"tenant,omitempty"` // the configured tenant column's value, as text
	WriteTag   string    `json:"write_tag,omitempty"`

	// Prefix and Content are set for Op == Message.
	Prefix  string `json:"prefix,omitempty"`
	Content string `json:"content,omitempty"`
}

// Txn is one committed transaction as the changefeed hands it to its sink.
type Txn struct {
	XID uint32 // the top-level transaction id as pgoutput sends it: 32 bits, wrapping
	// XID8 is XID with its epoch: the id to compare (see XID8), and the one Postgres's
	// pg_current_xact_id() and pg_current_snapshot() report. Zero for a Message sent outside
	// any transaction.
	XID8       XID8
	CommitLSN  LSN       // the commit record's LSN: the position every event of it carries
	EndLSN     LSN       // the end of the commit record: what is confirmed to Postgres once handed on
	CommitTime time.Time // zero when not Transactional
	WriteTag   string
	// Transactional is false for a logical message emitted outside any transaction, which
	// Postgres sends at once, whether or not the emitting transaction later commits.
	Transactional bool
	Events        []Event
	// Overflow is set when the transaction was too large to hold: its rows were let go, and
	// Events is empty. Every consumer of a table it names must treat its view as stale.
	Overflow *Overflow
}

// Overflow says what an oversized transaction changed without carrying the rows.
type Overflow struct {
	Tables  map[string]int // changes let go, by schema-qualified table
	Changes int            // their total
}

// AppendJSON appends the event as one JSON object to dst, with the same fields and names as
// encoding/json would give it, without reflection: this runs once per change on hot paths.
func (e *Event) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	if e.Table != "" {
		dst = append(dst, `"table":`...)
		dst = AppendJSONString(dst, e.Table)
		dst = append(dst, ',')
	}
	dst = append(dst, `"op":`...)
	dst = AppendJSONString(dst, string(e.Op))
	dst = append(dst, `,"before":`...)
	dst = e.Before.AppendJSON(dst)
	dst = append(dst, `,"after":`...)
	dst = e.After.AppendJSON(dst)
	if len(e.Omitted) > 0 {
		dst = append(dst, `,"omitted":[`...)
		for i, c := range e.Omitted {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, c)
		}
		dst = append(dst, ']')
	}
	if e.BeforeKeyOnly {
		dst = append(dst, `,"before_key_only":true`...)
	}
	dst = append(dst, `,"lsn":"`...)
	dst = appendLSN(dst, e.LSN)
	dst = append(dst, '"')
	if e.TxID != 0 {
		dst = append(dst, `,"txid":`...)
		dst = strconv.AppendUint(dst, uint64(e.TxID), 10)
	}
	if !e.CommitTime.IsZero() {
		dst = append(dst, `,"commit_time":"`...)
		dst = e.CommitTime.UTC().AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	if e.Tenant != "" {
		dst = append(dst, `,"tenant":`...)
		dst = AppendJSONString(dst, e.Tenant)
	}
	if e.WriteTag != "" {
		dst = append(dst, `,"write_tag":`...)
		dst = AppendJSONString(dst, e.WriteTag)
	}
	if e.Prefix != "" {
		dst = append(dst, `,"prefix":`...)
		dst = AppendJSONString(dst, e.Prefix)
	}
	if e.Content != "" {
		dst = append(dst, `,"content":`...)
		dst = AppendJSONString(dst, e.Content)
	}
	return append(dst, '}')
}

// appendLSN appends the text form of l, in Postgres's upper-case hexadecimal, without
// allocating.
func appendLSN(dst []byte, l LSN) []byte {
	dst = appendHex32(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendHex32(dst, uint32(l))
}

func appendHex32(dst []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&0xF]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}
