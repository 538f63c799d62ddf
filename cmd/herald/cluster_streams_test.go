package main

// What the many-nodes tests receive and how they judge it: a recorder of a client connection's
// data frames, a raw herald.v1 connection for the frames the Go client does not speak
// (presence), an SSE stream reader, the ledger of what a test published, and the checks of a
// channel's stream against it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/client"
)

// recorder keeps every data frame one client connection receives, in order, until the
// connection ends.
type recorder struct {
	who    string
	conn   *client.Conn
	mu     sync.Mutex
	frames []client.Frame // guarded by mu
	err    error          // guarded by mu: how the reading ended; nil while it goes on
	done   chan struct{}
}

func record(who string, conn *client.Conn) *recorder {
	r := &recorder{who: who, conn: conn, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			f, _, err := conn.Next(context.Background())
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.mu.Unlock()
				return
			}
			r.frames = append(r.frames, f)
			r.mu.Unlock()
		}
	}()
	return r
}

// of returns the frames of subscription sub received so far.
func (r *recorder) of(sub string) []client.Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []client.Frame
	for _, f := range r.frames {
		if frameSub(f) == sub {
			out = append(out, f)
		}
	}
	return out
}

// ended returns why the reading ended, nil while it goes on.
func (r *recorder) ended() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func frameSub(f client.Frame) string {
	switch f := f.(type) {
	case *client.Change:
		return f.Sub
	case *client.Message:
		return f.Sub
	case *client.Resync:
		return f.Sub
	case *client.ErrorFrame:
		return f.Sub
	case *client.Unsubscribed:
		return f.Sub
	}
	return ""
}

// pubData is the data of a test's publication: its key, unique in the test.
type pubData struct {
	K string `json:"k"`
}

func keyData(k string) []byte {
	b, _ := json.Marshal(pubData{K: k})
	return b
}

func keyOf(m *client.Message) string {
	var d pubData
	_ = json.Unmarshal(m.Data, &d)
	return d.K
}

// ledger is what a test published: each key's answered position, and the keys whose publish
// failed, which may or may not have been published (an answer lost on the way).
type ledger struct {
	mu        sync.Mutex
	acked     map[string]client.Position // guarded by mu
	uncertain map[string]error           // guarded by mu
	order     map[string][]string        // guarded by mu: per publisher, its acked keys in publish order
}

func newLedger() *ledger {
	return &ledger{acked: map[string]client.Position{}, uncertain: map[string]error{}, order: map[string][]string{}}
}

func (l *ledger) note(publisher, key string, pos client.Position, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.uncertain[key] = err
		return
	}
	l.acked[key] = pos
	l.order[publisher] = append(l.order[publisher], key)
}

// snapshot copies the ledger.
func (l *ledger) snapshot() (acked map[string]client.Position, uncertain map[string]error, order map[string][]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acked = make(map[string]client.Position, len(l.acked))
	for k, v := range l.acked {
		acked[k] = v
	}
	uncertain = make(map[string]error, len(l.uncertain))
	for k, v := range l.uncertain {
		uncertain[k] = v
	}
	order = make(map[string][]string, len(l.order))
	for k, v := range l.order {
		order[k] = slices.Clone(v)
	}
	return acked, uncertain, order
}

// lasts returns each publisher's last acked position: what a subscriber must reach to have
// everything.
func (l *ledger) lasts() []client.Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []client.Position
	for _, keys := range l.order {
		out = append(out, l.acked[keys[len(keys)-1]])
	}
	return out
}

// reachedAll reports whether frames have come as far as every position of ps.
func reachedAll(frames []client.Frame, ps []client.Position) bool {
	for _, p := range ps {
		if !reached(frames, p) {
			return false
		}
	}
	return true
}

// reached reports whether a channel subscription's frames have come as far as p: a message at
// or past it in its epoch, or a resync whose range ends there or later.
func reached(frames []client.Frame, p client.Position) bool {
	for _, f := range frames {
		switch f := f.(type) {
		case *client.Message:
			if f.Pos.Epoch == p.Epoch && f.Pos.Offset >= p.Offset {
				return true
			}
		case *client.Resync:
			if f.Last.Epoch == p.Epoch && f.Last.Offset >= p.Offset {
				return true
			}
		}
	}
	return false
}

// reporter is what the checks report to: the test, or in the checks' own test a list.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// channelReport is what checkChannel found in one subscription's frames.
type channelReport struct {
	delivered, covered int
	resyncs            []*client.Resync
}

// checkChannel checks one channel subscription's frames against what the test published:
//   - each publication arrives at most once, at the position its publish was answered with
//     (so every node's subscribers see it at one position), and no two at one position;
//   - a message nobody published, or whose publish failed for sure, never arrives;
//   - within an epoch offsets only grow; epochs come in the order they were published in, and
//     a change of epoch comes after a resync;
//   - every acked publication arrives, or a resync stands where it would have been: after the
//     last message before it and before the first after it.
//
// The test must have waited until the frames reached each publisher's last acked position.
func checkChannel(t reporter, who string, frames []client.Frame, l *ledger) channelReport {
	t.Helper()
	acked, uncertain, order := l.snapshot()
	at := map[client.Position]string{} // the key each acked position belongs to
	for k, p := range acked {
		at[p] = k
	}
	rank := epochRanks(order, acked, frames)
	// before reports whether position a comes before b in the subscription's stream.
	before := func(a, b client.Position) bool {
		if a.Epoch != b.Epoch {
			return rank[a.Epoch] < rank[b.Epoch]
		}
		return a.Offset < b.Offset
	}
	var rep channelReport
	seen := map[string]client.Position{}
	var prev *client.Message
	resyncSincePrev := false
	for i, f := range frames {
		switch f := f.(type) {
		case *client.Resync:
			rep.resyncs = append(rep.resyncs, f)
			resyncSincePrev = true
			continue
		case *client.Message:
			k := keyOf(f)
			p, ok := acked[k]
			_, dup := seen[k]
			switch {
			case k == "":
				t.Errorf("%s: frame %d: a message the test did not publish: %s at %v", who, i, f.Data, f.Pos)
			case dup:
				t.Errorf("%s: frame %d: publication %s arrived twice, at %v and at %v", who, i, k, seen[k], f.Pos)
			case ok && p != f.Pos:
				t.Errorf("%s: frame %d: publication %s arrived at %v, but its publish was answered %v: the nodes disagree on its position", who, i, k, f.Pos, p)
			case !ok && uncertain[k] == nil:
				t.Errorf("%s: frame %d: publication %s arrived at %v, but it was never published", who, i, k, f.Pos)
			case at[f.Pos] != "" && at[f.Pos] != k:
				t.Errorf("%s: frame %d: publication %s arrived at %v, the position of publication %s: two publications at one position", who, i, k, f.Pos, at[f.Pos])
			}
			seen[k] = f.Pos
			switch {
			case prev == nil:
			case !before(prev.Pos, f.Pos):
				t.Errorf("%s: frame %d: %s at %v after %s at %v: positions must grow", who, i, k, f.Pos, keyOf(prev), prev.Pos)
			case prev.Pos.Epoch != f.Pos.Epoch && !resyncSincePrev:
				t.Errorf("%s: frame %d: %s at %v, in another epoch than %s at %v, with no resync between", who, i, k, f.Pos, keyOf(prev), prev.Pos)
			}
			prev, resyncSincePrev = f, false
			rep.delivered++
		default:
			t.Errorf("%s: frame %d: unexpected %T %+v", who, i, f, f)
		}
	}
	// Each acked publication that did not arrive: a resync must stand in its place.
	for k, p := range acked {
		if _, ok := seen[k]; ok {
			continue
		}
		lo := -1 // the last message before p
		for i, f := range frames {
			if m, ok := f.(*client.Message); ok && before(m.Pos, p) {
				lo = i
			}
		}
		hi := len(frames) // the first message after lo that comes after p
		for i := lo + 1; i < len(frames); i++ {
			if m, ok := frames[i].(*client.Message); ok && before(p, m.Pos) {
				hi = i
				break
			}
		}
		covered := false
		for _, f := range frames[lo+1 : hi] {
			if _, ok := f.(*client.Resync); ok {
				covered = true
			}
		}
		if !covered {
			t.Errorf("%s: publication %s at %v never arrived, and no resync stands in its place (between frames %d and %d): silent loss", who, k, p, lo, hi)
			continue
		}
		rep.covered++
	}
	if len(rep.resyncs) > 0 {
		t.Logf("%s: %d delivered, %d covered by %d resyncs: %s", who, rep.delivered, rep.covered, len(rep.resyncs), describeResyncs(rep.resyncs))
	}
	return rep
}

// epochRanks orders a channel's epochs: as the publishers were answered them, then any other
// in the order frames carry them.
func epochRanks(order map[string][]string, acked map[string]client.Position, frames []client.Frame) map[string]int {
	rank := map[string]int{}
	add := func(e string) {
		if _, ok := rank[e]; !ok {
			rank[e] = len(rank)
		}
	}
	names := slices.Sorted(maps.Keys(order))
	for _, name := range names {
		for _, k := range order[name] {
			add(acked[k].Epoch)
		}
	}
	for _, f := range frames {
		if m, ok := f.(*client.Message); ok {
			add(m.Pos.Epoch)
		}
	}
	return rank
}

func describeResyncs(rs []*client.Resync) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s %v..%v lost %d", r.Reason, r.First, r.Last, r.Lost))
	}
	return strings.Join(parts, "; ")
}

// describeFrames summarizes frames for a failure message: counts by type and the last few.
func describeFrames(frames []client.Frame) string {
	counts := map[client.FrameType]int{}
	for _, f := range frames {
		counts[f.Type()]++
	}
	var last []string
	for _, f := range frames[max(0, len(frames)-3):] {
		switch f := f.(type) {
		case *client.Message:
			last = append(last, fmt.Sprintf("message %s at %v", keyOf(f), f.Pos))
		case *client.Change:
			last = append(last, fmt.Sprintf("%s at %v", f.Op, f.Position()))
		case *client.Resync:
			last = append(last, fmt.Sprintf("resync %s %v..%v", f.Reason, f.First, f.Last))
		default:
			last = append(last, fmt.Sprintf("%T", f))
		}
	}
	return fmt.Sprintf("%v, last: %s", counts, strings.Join(last, ", "))
}

// rawFrame is a server frame as the presence and SSE tests read it.
type rawFrame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Sub     string          `json:"sub"`
	Channel string          `json:"channel"`
	Code    string          `json:"code"`
	Session string          `json:"session"`
	Member  json.RawMessage `json:"member"` // a member object; in tracked, the member's id
	Members []member        `json:"members"`
	Pos     client.Position `json:"pos"`
	Data    json.RawMessage `json:"data"`
	raw     string
}

// memberOf is a join or leave frame's member.
func (f rawFrame) memberOf() member {
	var m member
	_ = json.Unmarshal(f.Member, &m)
	return m
}

type member struct {
	ID      string          `json:"id"`
	Subject string          `json:"subject"`
	Meta    json.RawMessage `json:"meta"`
}

// frameLog is a list of raw frames one reader appends to and the test waits on.
type frameLog struct {
	who    string
	mu     sync.Mutex
	frames []rawFrame // guarded by mu
	err    error      // guarded by mu: how the reading ended
}

func (l *frameLog) add(b []byte) {
	var f rawFrame
	if err := json.Unmarshal(b, &f); err != nil {
		f = rawFrame{Type: "unreadable"}
	}
	f.raw = string(b)
	l.mu.Lock()
	l.frames = append(l.frames, f)
	l.mu.Unlock()
}

func (l *frameLog) end(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *frameLog) list() []rawFrame {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.frames)
}

// waitFrame waits for the first frame after the from-th that match accepts, and returns its
// index and the frame.
func (l *frameLog) waitFrame(t *testing.T, from int, what string, match func(rawFrame) bool) (int, rawFrame) {
	t.Helper()
	var idx int
	var got rawFrame
	waitFor(t, deliveredWithin, func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := from; i < len(l.frames); i++ {
			if match(l.frames[i]) {
				idx, got = i, l.frames[i]
				return true, ""
			}
		}
		var recent []string
		for _, f := range l.frames[max(from, len(l.frames)-4):] {
			recent = append(recent, f.raw)
		}
		return false, fmt.Sprintf("%s to receive %s; reading ended: %v; frames since %d: %s", l.who, what, l.err, from, strings.Join(recent, " "))
	})
	return idx, got
}

// rawConn is a herald.v1 WebSocket connection spoken frame by frame.
type rawConn struct {
	*frameLog
	ws  *websocket.Conn
	ids int // owned by the test goroutine
}

// dialRaw connects to n as subject and reads every frame into the log.
func (c *cluster) dialRaw(t *testing.T, n *node, who, subject string) *rawConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+n.addr+"/v1/ws", &websocket.DialOptions{Subprotocols: []string{"herald.v1"}})
	if err != nil {
		t.Fatalf("%s: dial %s: %v", who, n.name, err)
	}
	ws.SetReadLimit(-1)
	rc := &rawConn{frameLog: &frameLog{who: who}, ws: ws}
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				rc.end(err)
				return
			}
			rc.add(b)
		}
	}()
	t.Cleanup(func() { _ = ws.CloseNow() })
	rc.request(t, map[string]any{"type": "connect", "token": c.token(subject)}, "welcome")
	return rc
}

// request sends a frame with a fresh id and waits for the reply with that id, which must be of
// type want.
func (rc *rawConn) request(t *testing.T, f map[string]any, want string) rawFrame {
	t.Helper()
	rc.ids++
	id := strconv.Itoa(rc.ids)
	f["id"] = id
	b, _ := json.Marshal(f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("%s: send %s: %v", rc.who, b, err)
	}
	_, r := rc.waitFrame(t, 0, fmt.Sprintf("the reply to %s", b), func(f rawFrame) bool { return f.ID == id })
	if r.Type != want {
		t.Fatalf("%s: %s was answered %s, want %s", rc.who, b, r.raw, want)
	}
	return r
}

// close ends the connection with close 1000, as a client leaving does.
func (rc *rawConn) close() { _ = rc.ws.Close(websocket.StatusNormalClosure, "") }

// sseStream is a GET /v1/sse stream whose events are read into a log.
type sseStream struct {
	*frameLog
	session string
}

// openSSE opens a stream on n as subject and waits for its welcome.
func (c *cluster) openSSE(t *testing.T, n *node, who, subject string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.addr+"/v1/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token(subject))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: GET /v1/sse on %s: %v", who, n.name, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("%s: GET /v1/sse on %s: HTTP %d", who, n.name, resp.StatusCode)
	}
	s := &sseStream{frameLog: &frameLog{who: who}}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				s.add([]byte(data))
			}
		}
		s.end(fmt.Errorf("stream ended: %v", sc.Err()))
	}()
	_, w := s.waitFrame(t, 0, "welcome", func(f rawFrame) bool { return f.Type == "welcome" })
	if w.Session == "" {
		t.Fatalf("%s: welcome without a session: %s", who, w.raw)
	}
	s.session = w.Session
	return s
}

// command posts frame to POST /v1/sse/{session} on n with subject's token and returns the HTTP
// status and body.
func (c *cluster) command(t *testing.T, n *node, session, subject, frame string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+n.addr+"/v1/sse/"+session, strings.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token(subject))
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/sse/%s on %s: %v", session, n.name, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	return resp.StatusCode, b.String()
}
