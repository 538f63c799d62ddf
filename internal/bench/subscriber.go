package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/wire"
)

// subSpec is what every subscriber subscribes to.
type subSpec struct {
	table   string
	filter  []byte
	channel string
	token   string
}

// tally is what the subscribers have received, summed across them. Every field is updated
// with atomic adds by the subscribers' goroutines and read by the progress loop.
type tally struct {
	received atomic.Int64 // change and message frames that carried a send time
	unmarked atomic.Int64 // change and message frames without one (not the bench's writes)
	resyncs  atomic.Int64
	lost     atomic.Int64 // the lost counts resyncs carried
	errors   atomic.Int64 // error frames
	lastNS   atomic.Int64 // unix ns of the latest receipt

	reasonsMu sync.Mutex
	reasons   map[string]int64 // resyncs by reason; guarded by reasonsMu (resyncs are rare)
	latency   histogram
}

// frame counts one received frame. It runs on the subscriber's goroutine for every frame, so it
// parses no JSON: see sentAt.
func (t *tally) frame(f []byte, now time.Time) {
	switch kindOf(f) {
	case kindData:
		ns, ok := sentAt(f)
		if !ok {
			t.unmarked.Add(1)
			return
		}
		t.received.Add(1)
		t.latency.record(time.Duration(now.UnixNano() - ns))
		if n := now.UnixNano(); n > t.lastNS.Load() {
			t.lastNS.Store(n) // a race between subscribers only loses a few ns of the duration
		}
	case kindResync:
		t.resyncs.Add(1)
		t.lost.Add(lostOf(f))
		t.reasonsMu.Lock()
		if t.reasons == nil {
			t.reasons = map[string]int64{}
		}
		t.reasons[reasonOf(f)]++
		t.reasonsMu.Unlock()
	case kindError:
		t.errors.Add(1)
	}
}

// subscriber is one connection with one subscription, read by one goroutine.
type subscriber interface {
	// run reads frames into t until the connection ends, and returns why it ended: nil when
	// close ended it.
	run(t *tally) error
	// close ends the connection.
	close()
}

// wsSubscriber is a WebSocket subscriber.
type wsSubscriber struct {
	c       *websocket.Conn
	closing atomic.Bool
}

// dialWS connects, completes the connect handshake and subscribes, returning once the
// subscription is live.
func dialWS(ctx context.Context, hc *http.Client, endpoint string, s subSpec) (*wsSubscriber, error) {
	c, _, err := websocket.Dial(ctx, endpoint, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{wire.Subprotocol}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(-1)
	ok := false
	defer func() {
		if !ok {
			_ = c.CloseNow()
		}
	}()
	if err := writeFrame(ctx, c, &wire.Connect{ID: "c", Token: s.token}); err != nil {
		return nil, err
	}
	if _, err := readReply(ctx, c); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	sub := &wire.Subscribe{ID: "s", Sub: "b", Table: s.table, Filter: s.filter, Channel: s.channel}
	if err := writeFrame(ctx, c, sub); err != nil {
		return nil, err
	}
	if _, err := readReply(ctx, c); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	ok = true
	return &wsSubscriber{c: c}, nil
}

func writeFrame(ctx context.Context, c *websocket.Conn, f wire.Frame) error {
	b, err := wire.AppendFrame(nil, f)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}

// readReply reads the welcome or subscribed frame; an error frame is the error.
func readReply(ctx context.Context, c *websocket.Conn) (wire.Frame, error) {
	_, b, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	return decodeReply(b)
}

func decodeReply(b []byte) (wire.Frame, error) {
	f, err := wire.DecodeServer(b, 0)
	if err != nil {
		return nil, err
	}
	switch f := f.(type) {
	case *wire.Error:
		return nil, &client.Error{Op: "bench", Sub: f.Sub, Code: f.Code, Status: f.StatusCode(), Field: f.Field, Message: f.Message}
	case *wire.Welcome, *wire.Subscribed:
		return f, nil
	}
	return nil, fmt.Errorf("got a %s frame, want welcome or subscribed", f.Type())
}

func (s *wsSubscriber) run(t *tally) error {
	buf := make([]byte, 0, 4096)
	for {
		// No deadline: a read whose context can end arms a timer per message.
		_, r, err := s.c.Reader(context.Background())
		if err == nil {
			buf, err = readInto(buf[:0], r)
		}
		if err != nil {
			if s.closing.Load() {
				return nil
			}
			return err
		}
		t.frame(buf, time.Now())
	}
}

// readInto reads r to its end into buf, growing it as needed: one buffer a subscriber reuses
// for every frame.
func readInto(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func (s *wsSubscriber) close() {
	s.closing.Store(true)
	_ = s.c.Close(websocket.StatusNormalClosure, "")
}

// sseSubscriber is a Server-Sent Events subscriber: its subscription is the stream URL's.
type sseSubscriber struct {
	body    io.ReadCloser
	r       *bufio.Reader
	cancel  context.CancelFunc
	closing atomic.Bool
}

// sseURL is the stream URL declaring the subscription.
func sseURL(base string, s subSpec) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/v1/sse"
	q := url.Values{"sub": {"b"}}
	if s.table != "" {
		q.Set("table", s.table)
		if s.filter != nil {
			q.Set("filter", string(s.filter))
		}
	} else {
		q.Set("channel", s.channel)
	}
	if s.token != "" {
		q.Set("access_token", s.token)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// dialSSE opens the stream and reads until the subscription is live.
func dialSSE(ctx context.Context, hc *http.Client, streamURL string) (*sseSubscriber, error) {
	// The stream outlives ctx, which bounds only the handshake.
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, streamURL, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &sseSubscriber{body: resp.Body, r: bufio.NewReaderSize(resp.Body, 16<<10), cancel: cancel}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		s.close()
		if _, err := decodeReply(b); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("GET %s: HTTP %d", streamURL, resp.StatusCode)
	}
	for live := false; !live; {
		f, err := s.next()
		if err == nil {
			var r wire.Frame
			r, err = decodeReply(f)
			_, live = r.(*wire.Subscribed)
		}
		if err != nil {
			s.close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
	return s, nil
}

var dataField = []byte("data: ")

// next returns the next event's data: the frame. It is valid until the next call.
func (s *sseSubscriber) next() ([]byte, error) {
	for {
		line, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A frame longer than the buffer: gather it.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = s.r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return nil, err
		}
		if bytes.HasPrefix(line, dataField) {
			return bytes.TrimRight(line[len(dataField):], "\r\n"), nil
		}
	}
}

func (s *sseSubscriber) run(t *tally) error {
	for {
		f, err := s.next()
		if err != nil {
			if s.closing.Load() {
				return nil
			}
			return err
		}
		t.frame(f, time.Now())
	}
}

func (s *sseSubscriber) close() {
	s.closing.Store(true)
	s.cancel()
	_ = s.body.Close()
}

// closeReason names how a subscriber's connection ended, for the report: a close code's name,
// or "dropped".
func closeReason(err error) string {
	if st := websocket.CloseStatus(err); st != -1 {
		return fmt.Sprintf("%d %s", int(st), wire.CloseCode(st))
	}
	if err == nil {
		return ""
	}
	if strings.Contains(err.Error(), "EOF") {
		return "ended"
	}
	return "dropped"
}

// reasonOf reads a resync frame's reason without parsing the frame: "" when it has none.
func reasonOf(f []byte) string {
	const key = `"reason":"`
	i := bytes.Index(f, []byte(key))
	if i < 0 {
		return ""
	}
	rest := f[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// resyncReasons returns the resyncs counted by reason.
func (t *tally) resyncReasons() map[string]int64 {
	t.reasonsMu.Lock()
	defer t.reasonsMu.Unlock()
	out := make(map[string]int64, len(t.reasons))
	for k, v := range t.reasons {
		out[k] = v
	}
	return out
}
