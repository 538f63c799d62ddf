package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
)

// DefaultMaxFrameBytes is the limit Decode applies when given none: 64 KiB, which holds any
// subscribe with a sizeable filter and a publish of a modest document. Servers advertise their
// actual limit in welcome.limits.max_frame_bytes.
const DefaultMaxFrameBytes = 64 << 10

// MaxIDBytes bounds request ids and subscription ids. Both are 1 to 64 printable ASCII
// characters without spaces (0x21-0x7E): they are echoed in replies, label logs and metrics,
// and a subscription id starts an SSE event id, where a space ends it.
const MaxIDBytes = 64

// Decode reads one frame a client sent: *Connect, *Refresh, *Subscribe, *Unsubscribe,
// *Publish, *Ping, *Ack, *Track or *Untrack. limit is the largest frame accepted, in bytes; limit <= 0 means
// DefaultMaxFrameBytes. Every error is an *Error whose Code is frame_too_large, bad_frame,
// unknown_type or bad_position, with ID set when the frame's id could be read.
func Decode(b []byte, limit int) (Frame, error) {
	if limit <= 0 {
		limit = DefaultMaxFrameBytes
	}
	var r reader
	if err := r.start(b, limit, false); err != nil {
		return nil, err
	}
	var f Frame
	switch r.typ {
	case FrameConnect:
		f = r.connect()
	case FrameRefresh:
		f = &Refresh{ID: r.id, Token: r.string("token", required, `"token":"eyJhbGciOi..."`)}
	case FrameSubscribe:
		f = r.subscribe()
	case FrameUnsubscribe:
		f = &Unsubscribe{ID: r.id, Sub: r.token("sub", `"sub":"s1"`), Forget: r.bool("forget")}
	case FramePublish:
		f = r.publish()
	case FramePing:
		f = &Ping{ID: r.id}
	case FrameAck:
		f = &Ack{ID: r.id, Sub: r.token("sub", `"sub":"s1"`), Pos: r.position("pos", required)}
	case FrameTrack:
		f = &Track{ID: r.id, Channel: r.string("channel", required, `"channel":"rooms/1"`),
			Meta: r.raw("meta", optional, `"meta":{"name":"Ada"}`)}
	case FrameUntrack:
		f = &Untrack{ID: r.id, Channel: r.string("channel", required, `"channel":"rooms/1"`)}
	}
	if r.err != nil {
		return nil, r.err
	}
	return f, nil
}

// DecodePublishRequest reads the body of an HTTP publish, POST /v1/publish: a publish frame
// whose "type" may be left out and whose "id" is optional, {"id"?, "channel", "event"?, "data"}.
// Apart from those two it is exactly as strict as Decode is with a publish frame, so a gateway
// in front of the API and Herald cannot read one body two ways. The caller bounds the body's
// size. Every error is an *Error with code bad_frame.
func DecodePublishRequest(b []byte) (*Publish, error) {
	var r reader
	if err := r.parse(b, 0, maxNesting); err != nil {
		return nil, err
	}
	if id := r.string("id", nonEmpty, `"id":"order-42"`); r.err == nil && id != "" {
		r.id = r.token("id", `"id":"order-42"`)
	}
	if t := r.string("type", nonEmpty, `"type":"publish"`); r.err == nil && t != "" && FrameType(t) != FramePublish {
		r.fail("type", CodeBadFrame, `"type" may be left out or be "publish", not %q`, short(t))
	}
	if r.err != nil {
		return nil, r.err
	}
	f := r.publish()
	if r.err != nil {
		return nil, r.err
	}
	return f, nil
}

func (r *reader) publish() *Publish {
	return &Publish{
		ID:      r.id,
		Channel: r.string("channel", required, `"channel":"rooms/1"`),
		Event:   r.string("event", optional, `"event":"chat"`),
		Data:    r.raw("data", required, `"data":{"text":"hi"}`),
	}
}

// DecodeServer reads one frame the server sent, for a client. limit <= 0 means no limit: the
// server's frames carry rows and payloads of any size. It checks types and required fields as
// strictly as Decode but not the id grammar, which is the client's own.
//
// An error frame is returned as the frame (an *Error) with a nil error; a frame that cannot be
// read is the error. A frame type this version does not know is an error with code
// unknown_type, which a client must ignore: a newer server may send new frame types within v1.
func DecodeServer(b []byte, limit int) (Frame, error) {
	var r reader
	if err := r.start(b, limit, true); err != nil {
		return nil, err
	}
	var f Frame
	switch r.typ {
	case FrameWelcome:
		f = r.welcome()
	case FrameSubscribed:
		// A pattern subscription spans channels, so its subscribed carries no position.
		f = &Subscribed{ID: r.id, Sub: r.string("sub", required, `"sub":"s1"`), Pos: r.position("pos", optional),
			Key: r.strings("key", `"key":["id"]`), Snapshot: r.bool("snapshot")}
	case FrameUnsubscribed:
		f = &Unsubscribed{
			ID:      r.id,
			Sub:     r.string("sub", required, `"sub":"s1"`),
			Code:    Code(r.string("code", nonEmpty, `"code":"forbidden"`)),
			Message: r.string("message", optional, ""),
		}
	case FrameChange:
		f = r.change()
	case FrameMessage:
		f = &Message{
			Sub:     r.string("sub", required, `"sub":"s1"`),
			Pos:     r.position("pos", required),
			Channel: r.string("channel", required, `"channel":"rooms/1"`),
			Event:   r.string("event", optional, ""),
			Data:    r.raw("data", required, `"data":{"text":"hi"}`),
		}
	case FrameRows:
		f = r.rows()
	case FrameLive:
		f = &Live{Sub: r.string("sub", required, `"sub":"s1"`), Pos: r.position("pos", required)}
	case FrameResync:
		f = &Resync{
			Sub:    r.string("sub", required, `"sub":"s1"`),
			First:  r.position("first", optional),
			Last:   r.position("last", required),
			Lost:   r.uint("lost", 1<<64-1),
			Reason: ResyncReason(r.string("reason", required, `"reason":"lane_full"`)),
		}
	case FrameError:
		e := &Error{
			ID:      r.id,
			Code:    Code(r.string("code", required, `"code":"bad_frame"`)),
			Status:  int(r.statusField()),
			Message: r.string("message", optional, ""),
			Field:   r.string("field", optional, ""),
			Sub:     r.string("sub", optional, ""),
		}
		if e.Status == e.Code.Status() {
			e.Status = 0 // the default, so a decoded error compares equal to a made one
		}
		f = e
	case FramePong:
		f = &Pong{ID: r.id}
	case FrameRefreshed:
		f = &Refreshed{ID: r.id, ExpiresAt: r.time("expires_at"), ExpiresIn: r.seconds("expires_in")}
	case FramePublished:
		f = &Published{ID: r.id, Pos: r.position("pos", required)}
	case FrameExpiring:
		f = &Expiring{ExpiresAt: r.time("expires_at"), ExpiresIn: r.seconds("expires_in")}
	case FrameTracked:
		f = &Tracked{ID: r.id, Channel: r.string("channel", required, `"channel":"rooms/1"`),
			Member: r.string("member", required, `"member":"alice/c1"`)}
	case FrameUntracked:
		f = &Untracked{ID: r.id, Channel: r.string("channel", required, `"channel":"rooms/1"`)}
	case FrameRoster:
		f = &Roster{Sub: r.string("sub", required, `"sub":"s1"`),
			Channel: r.string("channel", required, `"channel":"rooms/1"`), Members: r.members("members")}
	case FrameJoin:
		f = &Join{Sub: r.string("sub", required, `"sub":"s1"`),
			Channel: r.string("channel", required, `"channel":"rooms/1"`), Member: r.member("member")}
	case FrameLeave:
		l := &Leave{Sub: r.string("sub", required, `"sub":"s1"`),
			Channel: r.string("channel", required, `"channel":"rooms/1"`), Member: r.member("member")}
		l.Member.Meta = nil // a leave carries no meta; one sent anyway means nothing
		f = l
	}
	if r.err != nil {
		return nil, r.err
	}
	return f, nil
}

// need says how a field must be present.
type need uint8

const (
	optional need = iota // absent, null and "" all read as the zero value
	nonEmpty             // may be absent or null, but if present not ""
	required             // present, not null, not ""
)

// reader pulls typed fields out of one frame's members and keeps the first error, so each
// frame's decoder reads as a list of fields.
type reader struct {
	ms     []member
	buf    [12]member // backing for ms: frames rarely have more members
	id     string     // the frame's id, once it has been read
	typ    FrameType
	prefix string // for nested objects: "limits."
	err    *Error
}

// start checks the frame's size, encoding and syntax and reads its type and id.
func (r *reader) start(b []byte, limit int, server bool) *Error {
	depth := maxNesting
	if server {
		depth = maxServerNesting
	}
	if err := r.parse(b, limit, depth); err != nil {
		return err
	}

	// Read the id first, leniently, so that every later error can echo it.
	r.id = r.lenientID(server)

	typ := r.string("type", required, `"type":"subscribe"`)
	if r.err != nil {
		return r.err
	}
	r.typ = FrameType(typ)
	if msg := unknownType(r.typ, server); msg != "" {
		return &Error{ID: r.id, Code: CodeUnknownType, Field: "type", Message: msg}
	}
	if server {
		// Replies carry the id of their request; other server frames have none. Either
		// way it is the client's own string, so it is not checked against the grammar.
		switch r.typ {
		case FramePong, FrameRefreshed, FramePublished, FrameTracked, FrameUntracked:
			r.string("id", required, `"id":"1"`)
		default:
			r.string("id", optional, "")
		}
		return r.err
	}
	r.token("id", `"id":"1"`)
	return r.err
}

// lenientID returns the frame's id when it can be read and, for a client's frame, is in the
// grammar; otherwise "". Errors are not recorded: the id is read early only to be echoed.
func (r *reader) lenientID(server bool) string {
	v, _, err := r.find("id")
	if err == nil && len(v) > 0 && v[0] == '"' {
		if id := unquote(v); server || validToken(id) {
			return id
		}
	}
	return ""
}

// parse checks a frame's size (limit <= 0: none), encoding and syntax, and reads its members.
func (r *reader) parse(b []byte, limit, depth int) *Error {
	if limit > 0 && len(b) > limit {
		return &Error{Code: CodeFrameTooLarge, Message: fmt.Sprintf(
			"the frame is %d bytes and the limit is %d (welcome.limits.max_frame_bytes); send a smaller frame", len(b), limit)}
	}
	if !utf8.Valid(b) {
		return &Error{Code: CodeBadFrame, Message: "the frame is not valid UTF-8; send JSON text encoded as UTF-8"}
	}
	ms, ok, err := objectMembers(b, r.buf[:0], depth)
	if err != nil {
		return &Error{Code: CodeBadFrame, Err: err, Message: fmt.Sprintf(
			`the frame is not valid JSON (%v); send one JSON object, like {"type":"ping","id":"1"}`, err)}
	}
	if !ok {
		return &Error{Code: CodeBadFrame, Message: fmt.Sprintf(
			`the frame is %s; send one JSON object, like {"type":"ping","id":"1"}`, jsonKind(trimSpace(b)))}
	}
	r.ms = ms
	return nil
}

// unknownType returns why t is not a frame the reading side accepts, or "" when it is.
func unknownType(t FrameType, server bool) string {
	known := slices.Contains(FrameTypes(), t)
	q := strconv.Quote(short(string(t)))
	switch {
	case known && t.FromClient() != server:
		return ""
	case known && server:
		return q + " is a frame a client sends, not the server"
	case known:
		return q + " is a frame the server sends, not a client"
	case server:
		return "unknown frame type " + q + "; this client ignores it"
	}
	return "unknown frame type " + q + "; a client sends connect, refresh, subscribe, unsubscribe, publish, ping, ack, track or untrack"
}

func (r *reader) fail(field string, code Code, format string, args ...any) {
	if r.err != nil {
		return
	}
	r.err = &Error{ID: r.id, Code: code, Field: r.prefix + field, Message: fmt.Sprintf(format, args...)}
}

// find returns the raw value of field name, nil when it is absent or null (null reports
// whether it was null). A field that appears twice is an error: two parsers that keep
// different copies would disagree about what the frame says.
func (r *reader) find(name string) (v []byte, null bool, err error) {
	found := false
	for i := range r.ms {
		if string(r.ms[i].key) == name {
			if found {
				return nil, false, fmt.Errorf("%q appears more than once; send it once", r.prefix+name)
			}
			found = true
			v = r.ms[i].val
		}
	}
	if string(v) == "null" {
		return nil, true, nil
	}
	return v, false, nil
}

// field returns the raw value of name, failing when it is required and absent or null.
func (r *reader) field(name string, n need, example string) []byte {
	v, null, err := r.find(name)
	switch {
	case err != nil:
		r.fail(name, CodeBadFrame, "%v", err)
	case v == nil && n == required && null:
		r.fail(name, CodeBadFrame, "%q is null; give it a value, like %s", r.prefix+name, example)
	case v == nil && n == required:
		r.fail(name, CodeBadFrame, "%q is missing; add it, like %s", r.prefix+name, example)
	}
	return v
}

func (r *reader) wrongType(name, want string, v []byte, example string) {
	msg := fmt.Sprintf("%q must be %s, not %s", r.prefix+name, want, jsonKind(v))
	if example != "" {
		msg += "; like " + example
	}
	r.fail(name, CodeBadFrame, "%s", msg)
}

func (r *reader) string(name string, n need, example string) string {
	v := r.field(name, n, example)
	if v == nil {
		return ""
	}
	if v[0] != '"' {
		r.wrongType(name, "a string", v, example)
		return ""
	}
	s := unquote(v)
	if s == "" && n != optional {
		r.fail(name, CodeBadFrame, "%q is empty; give it a value, like %s", r.prefix+name, example)
	}
	return s
}

// token reads a required id: 1 to MaxIDBytes printable ASCII characters without spaces.
func (r *reader) token(name, example string) string {
	s := r.string(name, required, example)
	if s != "" && !validToken(s) {
		r.fail(name, CodeBadFrame, "%q must be 1 to %d printable ASCII characters without spaces, like %s",
			name, MaxIDBytes, example)
		return ""
	}
	return s
}

func validToken(s string) bool {
	if len(s) == 0 || len(s) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

// uint reads an optional whole number no larger than max; absent reads as 0.
func (r *reader) uint(name string, max uint64) uint64 {
	v := r.field(name, optional, "")
	if v == nil {
		return 0
	}
	n, ok := parseDecimal(string(v), max)
	if !ok {
		if v[0] == '-' || ('0' <= v[0] && v[0] <= '9') {
			r.fail(name, CodeBadFrame, "%q must be a whole number from 0 to %d, not %s", r.prefix+name, max, short(string(v)))
		} else {
			r.wrongType(name, "a number", v, "")
		}
	}
	return n
}

func (r *reader) statusField() uint64 {
	if r.field("status", required, `"status":400`) == nil {
		return 0
	}
	n := r.uint("status", 599)
	if n < 100 && r.err == nil {
		r.fail("status", CodeBadFrame, `"status" is an HTTP-like status from 100 to 599`)
	}
	return n
}

func (r *reader) seconds(name string) time.Duration {
	return time.Duration(r.uint(name, 1<<32)) * time.Second
}

func (r *reader) bool(name string) bool {
	v := r.field(name, optional, "")
	switch string(v) {
	case "", "false":
		return false
	case "true":
		return true
	}
	r.wrongType(name, "true or false", v, "")
	return false
}

func (r *reader) time(name string) time.Time {
	v := r.field(name, optional, "")
	if v == nil {
		return time.Time{}
	}
	const example = `"2025-01-02T03:04:05.123Z"`
	if v[0] != '"' {
		r.wrongType(name, "an RFC 3339 time", v, example)
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, unquote(v))
	// Years outside 0000-9999 in UTC have no RFC 3339 form to send back.
	if y := t.UTC().Year(); err != nil || y < 0 || y > 9999 {
		r.fail(name, CodeBadFrame, "%q must be an RFC 3339 time, like %s", r.prefix+name, example)
		return time.Time{}
	}
	return t
}

// raw reads any JSON value, compacted into a copy that does not alias the frame.
func (r *reader) raw(name string, n need, example string) json.RawMessage {
	v := r.field(name, n, example)
	if v == nil {
		return nil
	}
	return change.AppendCompactJSON(make([]byte, 0, len(v)), v)
}

// strings reads an array of non-empty strings; absent reads as nil, [] as an error.
func (r *reader) strings(name, example string) []string {
	v := r.field(name, optional, example)
	if v == nil {
		return nil
	}
	if v[0] != '[' {
		r.wrongType(name, "an array of strings", v, example)
		return nil
	}
	elems := arrayElements(v)
	if len(elems) == 0 {
		r.fail(name, CodeBadFrame, "%q is an empty list; name at least one, or leave it out", r.prefix+name)
		return nil
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if e[0] != '"' {
			r.fail(fmt.Sprintf("%s[%d]", name, i), CodeBadFrame, "%s[%d] must be a string, not %s; like %s",
				r.prefix+name, i, jsonKind(e), example)
			return nil
		}
		if out[i] = unquote(e); out[i] == "" {
			r.fail(fmt.Sprintf("%s[%d]", name, i), CodeBadFrame, "%s[%d] is empty; like %s", r.prefix+name, i, example)
			return nil
		}
	}
	return out
}

func (r *reader) position(name string, n need) Position {
	v := r.field(name, n, `"`+name+`":"16/B374D848"`)
	if v == nil {
		return Position{}
	}
	p, err := positionValue(v, r.prefix+name)
	if err != nil {
		if err.Field == "" {
			err.Field = r.prefix + name
		}
		r.fail(strings.TrimPrefix(err.Field, r.prefix), CodeBadFrame, "%s", err.Message)
	}
	return p
}

// positionValue reads a position's JSON form: a string holding its text form, or a channel
// position's object. name is the field's name, for errors; a failure is a bad_frame *Error
// whose Field is set when a member of the object is at fault, like "from.offset".
func positionValue(v []byte, name string) (Position, *Error) {
	switch v[0] {
	case '"':
		p, err := ParsePosition(unquote(v))
		if err != nil {
			return Position{}, &Error{Code: CodeBadFrame, Err: err, Message: fmt.Sprintf("%q: %v", name, err)}
		}
		return p, nil
	case '{':
	default:
		return Position{}, &Error{Code: CodeBadFrame, Message: fmt.Sprintf(
			`%q must be a position: a string like "16/B374D848" or an object like {"epoch":"k7Hq2x","offset":42}, not %s`,
			name, jsonKind(v))}
	}
	ms, _, err := objectMembers(v, nil, maxServerNesting)
	if err != nil {
		return Position{}, &Error{Code: CodeBadFrame, Err: err, Message: fmt.Sprintf("%q: %v", name, err)}
	}
	r := reader{ms: ms, prefix: name + "."}
	epoch := r.string("epoch", required, `"epoch":"k7Hq2x"`)
	if r.err == nil && !validEpoch(epoch) {
		r.fail("epoch", CodeBadFrame, "%q must be 1 to %d characters from A-Z a-z 0-9 . _ ~ -, like \"k7Hq2x\"",
			name+".epoch", MaxEpochBytes)
	}
	var offset uint64
	if r.field("offset", required, `"offset":42`); r.err == nil {
		offset = r.uint("offset", 1<<64-1)
	}
	if r.err != nil {
		return Position{}, r.err
	}
	return ChannelPosition(epoch, offset), nil
}

func (r *reader) connect() Frame {
	return &Connect{ID: r.id, Token: r.string("token", nonEmpty,
		`"token":"eyJhbGciOi...", or leave it out to use the upgrade request's token`)}
}

func (r *reader) subscribe() Frame {
	f := &Subscribe{
		ID:       r.id,
		Sub:      r.token("sub", `"sub":"s1"`),
		Table:    r.string("table", nonEmpty, `"table":"public.items"`),
		Filter:   r.raw("filter", optional, ""),
		Columns:  r.strings("columns", `"columns":["id","title"]`),
		Channel:  r.string("channel", nonEmpty, `"channel":"rooms/1"`),
		Event:    r.string("event", optional, ""),
		From:     r.position("from", optional),
		Mode:     Mode(r.string("mode", nonEmpty, `"mode":"broadcast"`)),
		Presence: r.bool("presence"),
		Durable:  r.bool("durable"),
		Snapshot: r.bool("snapshot"),
	}
	if r.err != nil {
		return nil
	}
	if f.Mode == "" {
		f.Mode = ModeBroadcast
	}
	if f.Mode == ModeSingle {
		f.Durable = true
	}
	if err := validateSubscribe(f); err != nil {
		err.ID = r.id
		r.err = err
		return nil
	}
	return f
}

// validateSubscribe checks what a subscribe means, apart from how it was written, so a
// subscription from an SSE URL gets the same checks as one from a frame.
func validateSubscribe(f *Subscribe) *Error {
	bad := func(field, format string, args ...any) *Error {
		return &Error{Code: CodeBadFrame, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case f.Table == "" && f.Channel == "":
		return bad("table", `subscribe names a table, like "table":"public.items", or a channel, like "channel":"rooms/1"`)
	case f.Table != "" && f.Channel != "":
		return bad("channel", "a subscription names a table or a channel, not both; send one subscribe for each")
	case f.Table != "" && !validTable(f.Table):
		return bad("table", `"table" must be schema-qualified, like "public.items"`)
	case f.Channel != "" && f.Filter != nil:
		return bad("filter", `"filter" goes with a table subscription; a channel subscription filters by "event"`)
	case f.Channel != "" && f.Columns != nil:
		return bad("columns", `"columns" goes with a table subscription; a channel subscription carries its publication's data whole`)
	case f.Table != "" && f.Event != "":
		return bad("event", `"event" goes with a channel subscription; a table subscription filters with "filter"`)
	case f.Presence && f.Channel == "":
		return bad("presence", `"presence" goes with a channel subscription; a table has no presence`)
	case f.Presence && strings.Contains(f.Channel, "*"):
		return bad("presence", `"presence" needs one channel, not a pattern: subscribe to each channel whose presence you show`)
	case f.Mode != ModeBroadcast && f.Mode != ModeSingle:
		return bad("mode", `"mode" must be "broadcast" (the default) or "single", not %q`, short(string(f.Mode)))
	case (f.Durable || f.Mode == ModeSingle) && strings.Contains(f.Channel, "*"):
		return bad("channel", "a durable subscription (mode single, or durable) takes one channel, not a pattern: its items' positions are one channel's stream")
	case (f.Durable || f.Mode == ModeSingle) && !f.From.IsZero():
		return bad("from", "a durable subscription (mode single, or durable) keeps its own queue and resumes by itself; subscribe without from")
	case (f.Durable || f.Mode == ModeSingle) && f.Presence:
		return bad("presence", `"presence" does not go with a durable subscription; subscribe to the channel's presence separately`)
	case f.Snapshot && f.Table == "":
		return bad("snapshot", `"snapshot" goes with a table subscription: a channel has no rows to read`)
	case f.Snapshot && !f.From.IsZero():
		return bad("snapshot", `"snapshot" starts from the table's rows as they are now, "from" resumes after a position the client already holds: send one of them, not both`)
	case f.Snapshot && f.Mode == ModeSingle:
		return bad("snapshot", `"snapshot" goes with mode "broadcast": the rows are this connection's own`)
	case f.Table != "" && f.From.IsChannel():
		return &Error{Code: CodeBadPosition, Field: "from", Message: fmt.Sprintf(
			`a table subscription resumes from a commit position like "16/B374D848", not the channel position %q`, f.From)}
	case f.Channel != "" && f.From.IsTable():
		return &Error{Code: CodeBadPosition, Field: "from", Message: fmt.Sprintf(
			`a channel subscription resumes from a channel position like {"epoch":"k7Hq2x","offset":42}, not the table position %q`, f.From)}
	}
	return nil
}

// validTable reports whether t looks schema-qualified: a dot with a name on each side. The
// router checks that the table exists; this catches the common mistake of leaving out the
// schema.
func validTable(t string) bool {
	i := strings.IndexByte(t, '.')
	return i > 0 && i < len(t)-1
}

// member reads a presence member object: {id, subject?, meta?}.
func (r *reader) member(name string) Member {
	v := r.field(name, required, `"member":{"id":"alice/c1"}`)
	if v == nil {
		return Member{}
	}
	return r.memberOf(name, v)
}

// members reads an array of presence members; [] is nobody.
func (r *reader) members(name string) []Member {
	v := r.field(name, required, `"members":[]`)
	if v == nil {
		return nil
	}
	if v[0] != '[' {
		r.wrongType(name, "an array of members", v, `"members":[{"id":"alice/c1"}]`)
		return nil
	}
	elems := arrayElements(v)
	out := make([]Member, 0, len(elems))
	for i, e := range elems {
		out = append(out, r.memberOf(fmt.Sprintf("%s[%d]", name, i), e))
	}
	return out
}

func (r *reader) memberOf(name string, v []byte) Member {
	if v[0] != '{' {
		r.wrongType(name, "a member object", v, `{"id":"alice/c1"}`)
		return Member{}
	}
	ms, _, _ := objectMembers(v, nil, maxServerNesting)
	mr := reader{ms: ms, id: r.id, prefix: r.prefix + name + "."}
	m := Member{
		ID:      mr.string("id", required, `"id":"alice/c1"`),
		Subject: mr.string("subject", optional, ""),
		Meta:    mr.raw("meta", optional, ""),
	}
	if mr.err != nil && r.err == nil {
		r.err = mr.err
	}
	return m
}

func (r *reader) welcome() Frame {
	if r.field("v", required, `"v":1`) == nil {
		return nil
	}
	f := &Welcome{
		ID:        r.id,
		Version:   int(r.uint("v", 1<<31-1)),
		Session:   r.string("session", required, `"session":"..."`),
		ExpiresAt: r.time("expires_at"),
		ExpiresIn: r.seconds("expires_in"),
	}
	if f.Version == 0 && r.err == nil {
		r.fail("v", CodeBadFrame, `"v" is the protocol version, 1 or more`)
	}
	v := r.field("limits", required, `"limits":{"max_frame_bytes":65536,"max_subscriptions":100}`)
	if v == nil {
		return nil
	}
	if v[0] != '{' {
		r.wrongType("limits", "an object", v, "")
		return nil
	}
	ms, _, _ := objectMembers(v, nil, maxServerNesting)
	lr := reader{ms: ms, id: r.id, prefix: "limits."}
	lr.field("max_frame_bytes", required, `"max_frame_bytes":65536`)
	lr.field("max_subscriptions", required, `"max_subscriptions":100`)
	f.Limits = Limits{
		MaxFrameBytes:    int(lr.uint("max_frame_bytes", 1<<31-1)),
		MaxSubscriptions: int(lr.uint("max_subscriptions", 1<<31-1)),
		PingInterval:     time.Duration(lr.uint("ping_interval_ms", 1<<31-1)) * time.Millisecond,
		MaxUnreadReplies: int(lr.uint("max_unread_replies", 1<<31-1)),
	}
	if lr.err != nil && r.err == nil {
		r.err = lr.err
	}
	return f
}

func (r *reader) change() Frame {
	sub := r.string("sub", required, `"sub":"s1"`)
	var lsn change.LSN
	if v := r.field("pos", required, `"pos":"16/B374D848"`); v != nil {
		if v[0] != '"' {
			r.wrongType("pos", "a commit LSN string", v, `"pos":"16/B374D848"`)
		} else if l, err := change.ParseLSN(unquote(v)); err != nil || l == 0 {
			r.fail("pos", CodeBadFrame, `"pos" must be a commit LSN like "16/B374D848", not %s`, short(string(v)))
		} else {
			lsn = l
		}
	}
	f := &Change{
		Sub:        sub,
		LSN:        lsn,
		Idx:        r.index(),
		Op:         Op(r.string("op", required, `"op":"insert"`)),
		Table:      r.string("table", required, `"table":"public.items"`),
		Row:        r.row("row"),
		Old:        r.row("old"),
		OldKeyOnly: r.bool("old_key_only"),
		Omitted:    r.strings("omitted", `"omitted":["body"]`),
		CommitTime: r.time("commit_time"),
		TxID:       r.uint("txid", 1<<64-1),
		WriteTag:   r.string("write_tag", optional, ""),
	}
	if f.Old == nil {
		f.OldKeyOnly = false // it describes old, and there is none
	}
	return f
}

// rows reads a rows frame: its rows, each an object of columns, and its progress.
func (r *reader) rows() Frame {
	f := &Rows{Sub: r.string("sub", required, `"sub":"s1"`), Last: r.bool("last")}
	if v := r.field("rows", required, `"rows":[]`); v != nil {
		if v[0] != '[' {
			r.wrongType("rows", "an array of rows", v, `"rows":[{"id":1}]`)
		} else {
			elems := arrayElements(v)
			f.Rows = make([]change.Row, 0, len(elems))
			for i, e := range elems {
				er := reader{ms: []member{{key: []byte("row"), val: e}}, id: r.id, prefix: fmt.Sprintf("rows[%d].", i)}
				row := er.row("row")
				if er.err != nil && r.err == nil {
					r.err = er.err
				}
				f.Rows = append(f.Rows, row)
			}
		}
	}
	v := r.field("progress", required, `"progress":{"rows":1,"bytes":9,"pages":1}`)
	if v == nil {
		return f
	}
	if v[0] != '{' {
		r.wrongType("progress", "an object", v, "")
		return f
	}
	ms, _, _ := objectMembers(v, nil, maxServerNesting)
	pr := reader{ms: ms, id: r.id, prefix: "progress."}
	f.Progress = Progress{
		Rows:  int(pr.uint("rows", 1<<53-1)),
		Bytes: int64(pr.uint("bytes", 1<<53-1)),
		Pages: int(pr.uint("pages", 1<<53-1)),
	}
	if pr.err != nil && r.err == nil {
		r.err = pr.err
	}
	return f
}

// index reads a change's idx: required, 1 or more.
func (r *reader) index() uint32 {
	if r.field("idx", required, `"idx":1`) == nil {
		return 0
	}
	n := uint32(r.uint("idx", 1<<32-1))
	if n == 0 {
		r.fail("idx", CodeBadFrame, `"idx" is a change's 1-based index in its transaction, 1 or more`)
	}
	return n
}

// row reads a row image: an object whose members are columns, in order.
func (r *reader) row(name string) change.Row {
	v := r.field(name, optional, "")
	if v == nil {
		return nil
	}
	if v[0] != '{' {
		r.wrongType(name, "an object of columns", v, "")
		return nil
	}
	ms, _, _ := objectMembers(v, nil, maxServerNesting)
	row := make(change.Row, len(ms))
	for i, m := range ms {
		row[i] = change.Column{Name: string(m.key), Value: change.AppendCompactJSON(make([]byte, 0, len(m.val)), m.val)}
	}
	return row
}

// arrayElements returns the elements of a scanned, valid JSON array.
func arrayElements(v []byte) [][]byte {
	s := scanner{b: v, i: 1, maxDepth: maxServerNesting} // v was validated already
	var out [][]byte
	s.ws()
	if s.i < len(v) && v[s.i] == ']' {
		return out
	}
	for s.i < len(v) {
		s.ws()
		start := s.i
		if s.value(0) != nil {
			return out
		}
		out = append(out, v[start:s.i])
		s.ws()
		s.i++ // ',' or ']'
	}
	return out
}

func trimSpace(b []byte) []byte {
	s := scanner{b: b}
	s.ws()
	return b[s.i:]
}
