package wire

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/stream"
)

// AppendDataHead appends the per-subscription head of a data frame of type t (FrameChange or
// FrameMessage) for subscription sub: `{"type":"change","sub":"s1",`. The head is half a JSON
// object; a body from AppendChangeBody or AppendMessageBody completes it. sub may be any
// string: it is escaped, so the frame stays valid JSON whatever it holds.
func AppendDataHead(dst []byte, t FrameType, sub string) []byte {
	switch t {
	case FrameChange:
		dst = append(dst, `{"type":"change","sub":`...)
	case FrameMessage:
		dst = append(dst, `{"type":"message","sub":`...)
	default:
		dst = append(dst, `{"type":`...)
		dst = change.AppendJSONString(dst, string(t))
		dst = append(dst, `,"sub":`...)
	}
	dst = change.AppendJSONString(dst, sub)
	return append(dst, ',')
}

// AppendChangeBody appends the shared body of c's change frame to dst:
// `"pos":"16/B374D848","idx":1,"op":"insert","table":"public.items","row":{...},...}`. It
// ignores c.Sub, which the head carries. It allocates nothing and does not validate: c.Idx
// must be 1 or more and c's row values valid JSON, as change.Row promises. Values are copied as they are, except
// that one holding a line break is compacted, so the frame stays one line.
func AppendChangeBody(dst []byte, c *Change) []byte {
	dst = append(dst, `"pos":"`...)
	dst = stream.AppendLSN(dst, c.LSN)
	dst = append(dst, '"')
	if c.Idx != 0 {
		dst = append(dst, `,"idx":`...)
		dst = strconv.AppendUint(dst, uint64(c.Idx), 10)
	}
	dst = append(dst, `,"op":`...)
	dst = change.AppendJSONString(dst, string(c.Op))
	dst = append(dst, `,"table":`...)
	dst = change.AppendJSONString(dst, c.Table)
	if c.Row != nil {
		dst = append(dst, `,"row":`...)
		dst = appendRow(dst, c.Row)
	}
	if c.Old != nil {
		dst = append(dst, `,"old":`...)
		dst = appendRow(dst, c.Old)
		if c.OldKeyOnly {
			dst = append(dst, `,"old_key_only":true`...)
		}
	}
	if len(c.Omitted) > 0 {
		dst = append(dst, `,"omitted":[`...)
		for i, name := range c.Omitted {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = change.AppendJSONString(dst, name)
		}
		dst = append(dst, ']')
	}
	if !c.CommitTime.IsZero() {
		dst = append(dst, `,"commit_time":"`...)
		dst = appendTime(dst, c.CommitTime)
		dst = append(dst, '"')
	}
	if c.TxID != 0 {
		dst = append(dst, `,"txid":`...)
		dst = strconv.AppendUint(dst, c.TxID, 10)
	}
	if c.WriteTag != "" {
		dst = append(dst, `,"write_tag":`...)
		dst = change.AppendJSONString(dst, c.WriteTag)
	}
	return append(dst, '}')
}

// AppendMessageBody appends the shared body of m's message frame to dst:
// `"pos":{"epoch":"k7Hq2x","offset":42},"channel":"rooms/1","event":"chat","data":{...}}`.
// It ignores m.Sub, which the head carries. It allocates nothing and does not validate:
// m.Data must be valid JSON (Decode's Publish.Data is). Nil Data is written as null.
func AppendMessageBody(dst []byte, m *Message) []byte {
	dst = append(dst, `"pos":`...)
	dst = m.Pos.AppendJSON(dst)
	dst = append(dst, `,"channel":`...)
	dst = change.AppendJSONString(dst, m.Channel)
	if m.Event != "" {
		dst = append(dst, `,"event":`...)
		dst = change.AppendJSONString(dst, m.Event)
	}
	dst = append(dst, `,"data":`...)
	dst = appendValue(dst, m.Data)
	return append(dst, '}')
}

// AppendResync appends r's resync frame to dst.
func AppendResync(dst []byte, r *Resync) []byte {
	return AppendGap(dst, r.Sub, &stream.Gap{First: r.First, Last: r.Last, Lost: r.Lost, Reason: r.Reason})
}

// AppendGap appends the resync frame that tells subscription sub about gap g.
func AppendGap(dst []byte, sub string, g *stream.Gap) []byte {
	dst = AppendDataHead(dst, FrameResync, sub)
	if !g.First.IsZero() {
		dst = append(dst, `"first":`...)
		dst = g.First.AppendJSON(dst)
		dst = append(dst, ',')
	}
	dst = append(dst, `"last":`...)
	dst = g.Last.AppendJSON(dst)
	if g.Lost > 0 {
		dst = append(dst, `,"lost":`...)
		dst = strconv.AppendUint(dst, g.Lost, 10)
	}
	dst = append(dst, `,"reason":`...)
	dst = change.AppendJSONString(dst, string(g.Reason))
	return append(dst, '}')
}

// AppendRows appends the rows frame of one page of subscription sub's snapshot: rows, each
// written as appendRow writes a change's row, the progress so far, and whether it is the last.
func AppendRows(dst []byte, sub string, rows []change.Row, p Progress, last bool) []byte {
	dst = AppendDataHead(dst, FrameRows, sub)
	dst = append(dst, `"rows":[`...)
	for i, row := range rows {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendRow(dst, row)
	}
	dst = append(dst, `],"progress":{"rows":`...)
	dst = strconv.AppendInt(dst, int64(p.Rows), 10)
	dst = append(dst, `,"bytes":`...)
	dst = strconv.AppendInt(dst, p.Bytes, 10)
	dst = append(dst, `,"pages":`...)
	dst = strconv.AppendInt(dst, int64(p.Pages), 10)
	dst = append(dst, '}')
	if last {
		dst = append(dst, `,"last":true`...)
	}
	return append(dst, '}')
}

// AppendLive appends the live frame of subscription sub at pos.
func AppendLive(dst []byte, sub string, pos Position) []byte {
	dst = AppendDataHead(dst, FrameLive, sub)
	dst = append(dst, `"pos":`...)
	dst = pos.AppendJSON(dst)
	return append(dst, '}')
}

// AppendPresenceBody appends the shared body of a presence frame (roster, join or leave) on
// channel: the roster's members, or the one member of a join or a leave (a leave's without its
// meta). The members' meta must be valid JSON; it is written compacted.
func AppendPresenceBody(dst []byte, channel string, kind stream.PresenceKind, members []Member) []byte {
	dst = append(dst, `"channel":`...)
	dst = change.AppendJSONString(dst, channel)
	if kind == stream.PresenceRoster {
		dst = append(dst, `,"members":[`...)
		for i := range members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendMember(dst, &members[i], true)
		}
		return append(dst, "]}"...)
	}
	dst = append(dst, `,"member":`...)
	var m Member
	if len(members) > 0 {
		m = members[0]
	}
	dst = appendMember(dst, &m, kind != stream.PresenceLeave)
	return append(dst, '}')
}

func appendMember(dst []byte, m *Member, meta bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = change.AppendJSONString(dst, m.ID)
	dst = appendString(dst, "subject", m.Subject)
	if meta && len(m.Meta) > 0 {
		dst = append(dst, `,"meta":`...)
		dst = change.AppendCompactJSON(dst, m.Meta)
	}
	return append(dst, '}')
}

// AppendFrame appends any frame to dst: a client frame for a client to send, a server frame
// for the server to send, or an *Error. Data frames are written as head and body in one. It
// fails only when the frame would be malformed: a raw JSON field (a filter, data, a row value)
// that is not valid JSON, or a Change whose Idx is 0.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	if err := checkFrame(f); err != nil {
		return dst, err
	}
	switch f := f.(type) {
	case *Change:
		dst = AppendDataHead(dst, FrameChange, f.Sub)
		return AppendChangeBody(dst, f), nil
	case *Message:
		dst = AppendDataHead(dst, FrameMessage, f.Sub)
		return AppendMessageBody(dst, f), nil
	case *Resync:
		return AppendResync(dst, f), nil
	case *Rows:
		return AppendRows(dst, f.Sub, f.Rows, f.Progress, f.Last), nil
	case *Live:
		return AppendLive(dst, f.Sub, f.Pos), nil
	case *Roster:
		dst = AppendDataHead(dst, FrameRoster, f.Sub)
		return AppendPresenceBody(dst, f.Channel, stream.PresenceRoster, f.Members), nil
	case *Join:
		dst = AppendDataHead(dst, FrameJoin, f.Sub)
		return AppendPresenceBody(dst, f.Channel, stream.PresenceJoin, []Member{f.Member}), nil
	case *Leave:
		dst = AppendDataHead(dst, FrameLeave, f.Sub)
		return AppendPresenceBody(dst, f.Channel, stream.PresenceLeave, []Member{f.Member}), nil
	case *Connect:
		dst = appendStart(dst, FrameConnect, f.ID)
		dst = appendString(dst, "token", f.Token)
	case *Refresh:
		dst = appendStart(dst, FrameRefresh, f.ID)
		dst = appendString(dst, "token", f.Token)
	case *Subscribe:
		dst = appendStart(dst, FrameSubscribe, f.ID)
		dst = appendString(dst, "sub", f.Sub)
		dst = appendString(dst, "table", f.Table)
		if f.Filter != nil {
			dst = append(dst, `,"filter":`...)
			dst = change.AppendCompactJSON(dst, f.Filter)
		}
		if f.Columns != nil {
			dst = appendStrings(dst, "columns", f.Columns)
		}
		dst = appendString(dst, "channel", f.Channel)
		dst = appendString(dst, "event", f.Event)
		dst = appendPosition(dst, "from", f.From)
		if f.Mode != "" && f.Mode != ModeBroadcast {
			dst = appendString(dst, "mode", string(f.Mode))
		}
		if f.Durable {
			dst = append(dst, `,"durable":true`...)
		}
		if f.Presence {
			dst = append(dst, `,"presence":true`...)
		}
		if f.Snapshot {
			dst = append(dst, `,"snapshot":true`...)
		}
	case *Unsubscribe:
		dst = appendStart(dst, FrameUnsubscribe, f.ID)
		dst = appendString(dst, "sub", f.Sub)
		if f.Forget {
			dst = append(dst, `,"forget":true`...)
		}
	case *Publish:
		dst = appendStart(dst, FramePublish, f.ID)
		dst = appendString(dst, "channel", f.Channel)
		dst = appendString(dst, "event", f.Event)
		dst = append(dst, `,"data":`...)
		dst = appendValue(dst, f.Data)
	case *Track:
		dst = appendStart(dst, FrameTrack, f.ID)
		dst = appendString(dst, "channel", f.Channel)
		if f.Meta != nil {
			dst = append(dst, `,"meta":`...)
			dst = change.AppendCompactJSON(dst, f.Meta)
		}
	case *Untrack:
		dst = appendStart(dst, FrameUntrack, f.ID)
		dst = appendString(dst, "channel", f.Channel)
	case *Tracked:
		dst = appendStart(dst, FrameTracked, f.ID)
		dst = appendString(dst, "channel", f.Channel)
		dst = appendString(dst, "member", f.Member)
	case *Untracked:
		dst = appendStart(dst, FrameUntracked, f.ID)
		dst = appendString(dst, "channel", f.Channel)
	case *Ping:
		dst = appendStart(dst, FramePing, f.ID)
	case *Ack:
		dst = appendStart(dst, FrameAck, f.ID)
		dst = appendString(dst, "sub", f.Sub)
		dst = appendPosition(dst, "pos", f.Pos)
	case *Welcome:
		dst = appendStart(dst, FrameWelcome, f.ID)
		v := f.Version
		if v == 0 {
			v = Version
		}
		dst = append(dst, `,"v":`...)
		dst = strconv.AppendInt(dst, int64(v), 10)
		dst = appendString(dst, "session", f.Session)
		dst = appendExpiry(dst, f.ExpiresAt, f.ExpiresIn)
		dst = append(dst, `,"limits":{"max_frame_bytes":`...)
		dst = strconv.AppendInt(dst, int64(f.Limits.MaxFrameBytes), 10)
		dst = append(dst, `,"max_subscriptions":`...)
		dst = strconv.AppendInt(dst, int64(f.Limits.MaxSubscriptions), 10)
		if f.Limits.PingInterval > 0 {
			dst = append(dst, `,"ping_interval_ms":`...)
			dst = strconv.AppendInt(dst, f.Limits.PingInterval.Milliseconds(), 10)
		}
		if f.Limits.MaxUnreadReplies > 0 {
			dst = append(dst, `,"max_unread_replies":`...)
			dst = strconv.AppendInt(dst, int64(f.Limits.MaxUnreadReplies), 10)
		}
		dst = append(dst, '}')
	case *Subscribed:
		dst = appendStart(dst, FrameSubscribed, f.ID)
		dst = appendString(dst, "sub", f.Sub)
		dst = appendPosition(dst, "pos", f.Pos)
		if len(f.Key) > 0 {
			dst = append(dst, `,"key":[`...)
			for i, k := range f.Key {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = change.AppendJSONString(dst, k)
			}
			dst = append(dst, ']')
		}
		if f.Snapshot {
			dst = append(dst, `,"snapshot":true`...)
		}
	case *Unsubscribed:
		dst = appendStart(dst, FrameUnsubscribed, f.ID)
		dst = appendString(dst, "sub", f.Sub)
		dst = appendString(dst, "code", string(f.Code))
		dst = appendString(dst, "message", f.Message)
	case *Error:
		dst = appendStart(dst, FrameError, f.ID)
		dst = appendString(dst, "code", string(f.Code))
		dst = append(dst, `,"status":`...)
		dst = strconv.AppendInt(dst, int64(f.StatusCode()), 10)
		dst = appendString(dst, "message", f.Message)
		dst = appendString(dst, "field", f.Field)
		dst = appendString(dst, "sub", f.Sub)
	case *Pong:
		dst = appendStart(dst, FramePong, f.ID)
	case *Refreshed:
		dst = appendStart(dst, FrameRefreshed, f.ID)
		dst = appendExpiry(dst, f.ExpiresAt, f.ExpiresIn)
	case *Published:
		dst = appendStart(dst, FramePublished, f.ID)
		dst = appendPosition(dst, "pos", f.Pos)
	case *Expiring:
		dst = appendStart(dst, FrameExpiring, "")
		dst = appendExpiry(dst, f.ExpiresAt, f.ExpiresIn)
	default:
		return dst, fmt.Errorf("wire: AppendFrame: unknown frame %T", f)
	}
	return append(dst, '}'), nil
}

// checkFrame reports what would make f's encoding malformed: a raw JSON field (a filter,
// data, a row value) that is not valid JSON, or a change without its index.
func checkFrame(f Frame) error {
	check := func(name string, v []byte) error {
		if v != nil && !validJSON(v, maxServerNesting) {
			return fmt.Errorf("wire: %s frame: %s is not valid JSON", f.Type(), name)
		}
		return nil
	}
	checkRow := func(name string, row change.Row) error {
		for _, c := range row {
			if err := check(name+"."+c.Name, c.Value); err != nil {
				return err
			}
		}
		return nil
	}
	switch f := f.(type) {
	case *Subscribe:
		return check("filter", f.Filter)
	case *Publish:
		return check("data", f.Data)
	case *Message:
		return check("data", f.Data)
	case *Track:
		return check("meta", f.Meta)
	case *Roster:
		for i, m := range f.Members {
			if err := check(fmt.Sprintf("members[%d].meta", i), m.Meta); err != nil {
				return err
			}
		}
	case *Join:
		return check("member.meta", f.Member.Meta)
	case *Leave:
		return check("member.meta", f.Member.Meta)
	case *Rows:
		for i, row := range f.Rows {
			if err := checkRow(fmt.Sprintf("rows[%d]", i), row); err != nil {
				return err
			}
		}
	case *Change:
		if f.Idx == 0 {
			return fmt.Errorf("wire: change frame: Idx is 0; a change's index in its transaction starts at 1")
		}
		if err := checkRow("row", f.Row); err != nil {
			return err
		}
		return checkRow("old", f.Old)
	}
	return nil
}

// validJSON reports whether v is exactly one valid JSON value in valid UTF-8, nested no
// deeper than maxDepth.
func validJSON(v []byte, maxDepth int) bool {
	if !utf8.Valid(v) {
		return false
	}
	s := scanner{b: v, maxDepth: maxDepth}
	s.ws()
	if s.value(0) != nil {
		return false
	}
	s.ws()
	return s.i == len(v)
}

func appendStart(dst []byte, t FrameType, id string) []byte {
	dst = append(dst, `{"type":`...)
	dst = change.AppendJSONString(dst, string(t))
	return appendString(dst, "id", id)
}

// appendString appends `,"key":"v"`, or nothing when v is empty. Keys are this package's
// constants and need no escaping.
func appendString(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	dst = appendKey(dst, key)
	return change.AppendJSONString(dst, v)
}

func appendKey(dst []byte, key string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	return append(dst, '"', ':')
}

func appendStrings(dst []byte, key string, vs []string) []byte {
	dst = appendKey(dst, key)
	dst = append(dst, '[')
	for i, v := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = change.AppendJSONString(dst, v)
	}
	return append(dst, ']')
}

func appendPosition(dst []byte, key string, p Position) []byte {
	if p.IsZero() {
		return dst
	}
	dst = appendKey(dst, key)
	return p.AppendJSON(dst)
}

func appendExpiry(dst []byte, at time.Time, in time.Duration) []byte {
	if !at.IsZero() {
		dst = append(dst, `,"expires_at":"`...)
		dst = appendTime(dst, at)
		dst = append(dst, '"')
	}
	if in > 0 {
		dst = append(dst, `,"expires_in":`...)
		// Round down: a client that refreshes a second early loses nothing.
		dst = strconv.AppendInt(dst, int64(in/time.Second), 10)
	}
	return dst
}

func appendValue(dst, v []byte) []byte {
	if len(v) == 0 {
		return append(dst, "null"...)
	}
	return appendOneLine(dst, v)
}

func appendRow(dst []byte, row change.Row) []byte {
	dst = append(dst, '{')
	for i := range row {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = change.AppendJSONString(dst, row[i].Name)
		dst = append(dst, ':')
		dst = appendValue(dst, row[i].Value)
	}
	return append(dst, '}')
}

// timeLayout is RFC 3339 in UTC with exactly three fractional digits: the millisecond
// precision Herald keeps for commit times, at a fixed width that sorts as text.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// appendTime appends t in timeLayout. It writes the digits itself: it runs once per change
// body, and time.AppendFormat's layout interpretation cost more than the rest of a small body.
func appendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	y, mo, d := t.Date()
	if y < 0 || y > 9999 {
		return t.AppendFormat(dst, timeLayout) // no RFC 3339 form; keep the standard library's
	}
	h, mi, sec := t.Clock()
	dst = appendDigits(dst, y, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, int(mo), 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, d, 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, h, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, mi, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, sec, 2)
	dst = append(dst, '.')
	dst = appendDigits(dst, t.Nanosecond()/1e6, 3)
	return append(dst, 'Z')
}

// appendDigits appends the non-negative n in exactly width decimal digits.
func appendDigits(dst []byte, n, width int) []byte {
	var buf [4]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return append(dst, buf[:width]...)
}
