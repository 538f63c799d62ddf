package bench

import (
	"bytes"
	"math"
	"strconv"
)

// Frame kinds a subscriber tells apart by the frame's first bytes. The server writes "type"
// first and without spaces (wire.AppendDataHead, wire.AppendFrame), so a prefix says what a
// frame is without decoding it.
var (
	prefixChange  = []byte(`{"type":"change",`)
	prefixMessage = []byte(`{"type":"message",`)
	prefixResync  = []byte(`{"type":"resync",`)
	prefixError   = []byte(`{"type":"error",`)
)

// kind is what a received frame is, for counting.
type kind uint8

const (
	kindOther kind = iota
	kindData       // change or message
	kindResync
	kindError
)

func kindOf(f []byte) kind {
	switch {
	case bytes.HasPrefix(f, prefixMessage), bytes.HasPrefix(f, prefixChange):
		return kindData
	case bytes.HasPrefix(f, prefixResync):
		return kindResync
	case bytes.HasPrefix(f, prefixError):
		return kindError
	}
	return kindOther
}

// The send time's marks. A channel event's data is {"t":<unix ns>,"i":<seq>}, which the server
// passes on compacted, so its message frame holds `"data":{"t":`. A table event's payload
// column holds the unix ns as text, so its change frame's row holds `"payload":"`. A row value
// cannot hold the unescaped mark `"payload":"` inside a string, so the first match is the
// column's.
var (
	markData    = []byte(`"data":{"t":`)
	markPayload = []byte(`"payload":"`)
	markLost    = []byte(`"lost":`)
)

// sentAt returns the send time, in unix nanoseconds, that a change or message frame carries;
// ok is false when it carries none. It searches bytes rather than decoding JSON, so a
// subscriber keeps up with the server; TestSentAtAgreesWithDecode checks it against the full
// decoder.
func sentAt(f []byte) (ns int64, ok bool) {
	if i := bytes.Index(f, markData); i >= 0 {
		return intBefore(f[i+len(markData):], ',', '}')
	}
	if i := bytes.Index(f, markPayload); i >= 0 {
		return intBefore(f[i+len(markPayload):], '"', '"')
	}
	return 0, false
}

// lostOf returns a resync frame's lost count, 0 when it has none.
func lostOf(f []byte) int64 {
	i := bytes.Index(f, markLost)
	if i < 0 {
		return 0
	}
	n, _ := intBefore(f[i+len(markLost):], ',', '}')
	return n
}

// intBefore reads the non-negative int64 b starts with, which must end at one of the two
// bytes: 1 to 19 decimal digits, within int64.
func intBefore(b []byte, end1, end2 byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		d := int64(b[i] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if i == 0 || i == len(b) || b[i] != end1 && b[i] != end2 {
		return 0, false
	}
	return n, true
}

// channelData is a channel event's data: its send time and sequence number.
func channelData(dst []byte, sentNS int64, seq int) []byte {
	dst = append(dst, `{"t":`...)
	dst = strconv.AppendInt(dst, sentNS, 10)
	dst = append(dst, `,"i":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	return append(dst, '}')
}
