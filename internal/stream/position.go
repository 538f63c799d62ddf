package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/internal/change"
)

// Position is a place in one subscription's stream: every data frame carries the position it
// was committed or published at, a subscribe may resume after one, and a resync names the
// first and last one lost. One type serves both kinds of stream:
//
//   - A table stream position is the commit LSN of a transaction, plus Idx: 0 means after the
//     whole transaction, k >= 1 means after its k-th change. A transaction's changes share its
//     LSN, so the index is what lets a client that was cut off in the middle of a transaction
//     resume exactly after the last change it received. Text and JSON form: "16/B374D848" or
//     "16/B374D848.3".
//   - A channel stream position is an epoch, which names one incarnation of the channel's
//     stream, plus the offset of a publication in it (the first is 1; 0 is before it). Text
//     form "k7Hq2x:42"; JSON form {"epoch":"k7Hq2x","offset":42}.
//
// The zero Position means "none": no transaction commits at LSN 0/0 and no epoch is empty.
type Position struct {
	LSN    change.LSN // table streams: the transaction's commit LSN
	Idx    uint32     // table streams: 0 = after the whole transaction, k = after its k-th change
	Epoch  string     // channel streams: non-empty; see MaxEpochBytes for its alphabet
	Offset uint64     // channel streams: the publication's offset within Epoch
}

// MaxEpochBytes bounds an epoch. An epoch is 1 to 64 bytes from A-Z a-z 0-9 and "._~-" (the
// URL-unreserved characters), so a position's text form needs no escaping in a URL, a
// Last-Event-ID or a log line.
const MaxEpochBytes = 64

// MaxSafeOffset is the largest channel offset the server hands out: the largest integer a
// JavaScript number holds exactly (2^53-1). A stream that would pass it gets a new epoch.
const MaxSafeOffset = 1<<53 - 1

// TablePosition returns the position after change idx (1-based) of the transaction that
// committed at lsn, or after the whole transaction when idx is 0.
func TablePosition(lsn change.LSN, idx uint32) Position { return Position{LSN: lsn, Idx: idx} }

// ChannelPosition returns the position of the publication at offset in epoch.
func ChannelPosition(epoch string, offset uint64) Position {
	return Position{Epoch: epoch, Offset: offset}
}

// NoPositionText stands for the zero Position where a text form must not be empty: the
// subscribed of a subscription with no position (a channel pattern), in SSE event ids.
const NoPositionText = "-"

// IsZero reports whether p is the zero Position, "none".
func (p Position) IsZero() bool { return p == Position{} }

// IsChannel reports whether p is a channel stream position.
func (p Position) IsChannel() bool { return p.Epoch != "" }

// IsTable reports whether p is a table stream position.
func (p Position) IsTable() bool { return p.Epoch == "" && !p.IsZero() }

// String returns p's text form: "16/B374D848", "16/B374D848.3" or "k7Hq2x:42"; "" for zero.
func (p Position) String() string { return string(p.AppendText(nil)) }

// AppendText appends p's text form to dst.
func (p Position) AppendText(dst []byte) []byte {
	switch {
	case p.Epoch != "":
		dst = append(dst, p.Epoch...)
		dst = append(dst, ':')
		return strconv.AppendUint(dst, p.Offset, 10)
	case p.IsZero():
		return dst
	}
	dst = AppendLSN(dst, p.LSN)
	if p.Idx != 0 {
		dst = append(dst, '.')
		dst = strconv.AppendUint(dst, uint64(p.Idx), 10)
	}
	return dst
}

// AppendJSON appends p's JSON form to dst: a string for a table position, an object for a
// channel position, null for zero.
func (p Position) AppendJSON(dst []byte) []byte {
	switch {
	case p.Epoch != "":
		dst = append(dst, `{"epoch":`...)
		dst = change.AppendJSONString(dst, p.Epoch)
		dst = append(dst, `,"offset":`...)
		dst = strconv.AppendUint(dst, p.Offset, 10)
		return append(dst, '}')
	case p.IsZero():
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = p.AppendText(dst)
	return append(dst, '"')
}

// MarshalText implements encoding.TextMarshaler.
func (p Position) MarshalText() ([]byte, error) { return p.AppendText(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePosition.
func (p *Position) UnmarshalText(b []byte) error {
	v, err := ParsePosition(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalJSON implements json.Marshaler with AppendJSON.
func (p Position) MarshalJSON() ([]byte, error) { return p.AppendJSON(nil), nil }

// UnmarshalJSON implements json.Unmarshaler. It accepts either JSON form, and a channel
// position's text form as a string too.
func (p *Position) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*p = Position{}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("position: %w", err)
		}
		v, err := ParsePosition(s)
		if err != nil {
			return err
		}
		*p = v
		return nil
	}
	var obj struct {
		Epoch  *string `json:"epoch"`
		Offset *uint64 `json:"offset"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil || obj.Epoch == nil || obj.Offset == nil || !ValidEpoch(*obj.Epoch) {
		return fmt.Errorf(`position: want a string like "16/B374D848" or an object like {"epoch":"k7Hq2x","offset":42}`)
	}
	*p = ChannelPosition(*obj.Epoch, *obj.Offset)
	return nil
}

// errPositionSyntax is wrapped by every ParsePosition error.
var errPositionSyntax = errors.New("bad position")

// ParsePosition reads a position's text form: "16/B374D848" or "16/B374D848.3" for a table
// stream, "k7Hq2x:42" for a channel stream. Hexadecimal digits may be either case.
func ParsePosition(s string) (Position, error) {
	if strings.IndexByte(s, '/') >= 0 {
		// A '.' cannot occur in the hexadecimal LSN, so the first one starts the index.
		lsnText, idxText, hasIdx := strings.Cut(s, ".")
		lsn, err := change.ParseLSN(lsnText)
		if err != nil || lsn == 0 {
			return Position{}, positionError(s)
		}
		p := Position{LSN: lsn}
		if hasIdx {
			n, ok := ParseDecimal(idxText, 1<<32-1)
			if !ok || n == 0 {
				return Position{}, positionError(s)
			}
			p.Idx = uint32(n)
		}
		return p, nil
	}
	epoch, off, ok := strings.Cut(s, ":")
	if !ok || !ValidEpoch(epoch) {
		return Position{}, positionError(s)
	}
	n, ok := ParseDecimal(off, 1<<64-1)
	if !ok {
		return Position{}, positionError(s)
	}
	return Position{Epoch: epoch, Offset: n}, nil
}

func positionError(s string) error {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return &positionSyntaxError{text: s}
}

type positionSyntaxError struct{ text string }

func (e *positionSyntaxError) Error() string {
	return "position " + strconv.Quote(e.text) +
		": want a commit LSN like \"16/B374D848\" (optionally \".3\" after it) or \"epoch:offset\" like \"k7Hq2x:42\""
}

func (e *positionSyntaxError) Unwrap() error { return errPositionSyntax }

// ValidEpoch reports whether s is 1 to MaxEpochBytes bytes of A-Z a-z 0-9 and "._~-".
func ValidEpoch(s string) bool {
	if len(s) == 0 || len(s) > MaxEpochBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '~', c == '-':
		default:
			return false
		}
	}
	return true
}

// ParseDecimal reads s as a decimal number no larger than max: digits only, no sign and no
// leading zero, so every number has exactly one text form.
func ParseDecimal(s string, max uint64) (uint64, bool) {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > max {
		return 0, false
	}
	return n, true
}

const upperHex = "0123456789ABCDEF"

// AppendLSN appends l as Postgres prints it (16/B374D848) without change.LSN.String's
// allocation: it runs once per change body.
func AppendLSN(dst []byte, l change.LSN) []byte {
	dst = appendHex32(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendHex32(dst, uint32(l))
}

func appendHex32(dst []byte, v uint32) []byte {
	if v == 0 {
		return append(dst, '0')
	}
	var buf [8]byte
	i := len(buf)
	for v != 0 {
		i--
		buf[i] = upperHex[v&0xF]
		v >>= 4
	}
	return append(dst, buf[i:]...)
}
