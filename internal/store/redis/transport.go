package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Receiver is what a node's Transport hands what it reads to, on the transport's reader
// goroutine. Neither method may block: the receiver queues, as a stream.Receiver does.
type Receiver interface {
	// Receive hands over one payload sent by node from, in the order from sent them.
	Receive(from string, data []byte)
	// Gap says payloads from node from were lost before the next Receive from it (a producer's
	// queue overflowed, the stream was trimmed before it was read, Redis lost it, or from
	// restarted): the receiver resyncs what from feeds with upstream_gap.
	Gap(from string, reason GapReason)
}

// GapReason is why a Transport reports a gap. The same constant is the log attribute and the
// metric label.
type GapReason string

const (
	// GapLost: sequence numbers from a producer jumped: its queue overflowed, or entries were
	// trimmed or lost before this node read them.
	GapLost GapReason = "transport_lost"
	// GapRestart: a producer came back as a new incarnation; what its last one still held is
	// gone.
	GapRestart GapReason = "producer_restart"
	// GapStreamGone: this node's stream vanished (Redis restarted or lost it); anything sent to
	// it meanwhile is gone, from every producer.
	GapStreamGone GapReason = "stream_gone"
)

// TransportConfig configures a Transport. Node is required; every other zero field is its
// default.
type TransportConfig struct {
	// Node is this node's id: it reads the stream of that name and signs what it sends. It must
	// be new per process (a UUIDv7, say): a producer numbers what it sends to a node from 1.
	Node string
	// MaxLen bounds each node's stream, in entries (trimmed approximately). Default 100000.
	MaxLen int64
	// QueueItems and QueueBytes bound what waits to be sent to one node. Past either, a
	// payload is dropped; its sequence number is spent, so the receiver reports the hole as a
	// gap. Default 10000 payloads and 16 MiB.
	QueueItems int
	QueueBytes int
	// Batch is how many payloads one round trip sends. Default 256.
	Batch int
	// Block is how long a read waits for new entries before it looks at its stream again.
	// Default 2s.
	Block time.Duration
	// StreamTTL is how long a node's stream outlives its reader: a dead node's stream goes,
	// and producers (which never create a stream) stop adding to it. Default 1 minute.
	StreamTTL time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// Transport carries opaque payloads from this node to others, once per destination node, over
// one Redis stream per node. Order holds per (producer, destination): one goroutine per
// destination sends its queue in order. Loss is never silent: each entry carries its
// producer's incarnation and a sequence number per (producer incarnation, destination).
//
// Run owns every goroutine: one reader, and one sender per destination, started on first Send.
type Transport struct {
	c   *Client // read-only
	cfg TransportConfig
	inc string // this incarnation: random, new per Transport
	log *slog.Logger

	mu     sync.Mutex
	dests  map[string]*dest // guarded by mu
	runCtx context.Context  // guarded by mu; Run's while it runs, nil otherwise
	wg     sync.WaitGroup   // the senders

	lastID string                  // owned by the reader goroutine: the last entry read
	seen   map[string]producerSeen // owned by the reader goroutine
}

type producerSeen struct {
	inc string
	seq uint64
}

// dest is the queue to one node.
type dest struct {
	key string

	mu       sync.Mutex
	queue    []payload // guarded by mu
	bytes    int       // guarded by mu
	seq      uint64    // guarded by mu: the last sequence number spent
	sent     uint64    // guarded by mu: the last sequence number in the stream (a payload or a tick)
	settled  uint64    // guarded by mu: every seq up to this is in the stream or told of by a later one
	wake     chan struct{}
	progress chan struct{} // closed and replaced whenever settled moves; guarded by mu
	dropped  uint64        // guarded by mu
}

type payload struct {
	seq  uint64
	data []byte
}

// NewTransport returns a node's transport on c. Run starts it.
func NewTransport(c *Client, cfg TransportConfig) (*Transport, error) {
	if cfg.Node == "" {
		return nil, errors.New("redis transport: no node id")
	}
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = 100000
	}
	if cfg.QueueItems <= 0 {
		cfg.QueueItems = 10000
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 16 << 20
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.Block <= 0 {
		cfg.Block = 2 * time.Second
	}
	if cfg.StreamTTL <= 0 {
		cfg.StreamTTL = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Transport{c: c, cfg: cfg, inc: hex.EncodeToString(b[:]), log: cfg.Logger, dests: map[string]*dest{}, seen: map[string]producerSeen{}}, nil
}

func (t *Transport) streamKey(node string) string { return t.c.key("x", "{n:"+node+"}") }

// Send queues data for node and returns at once. Past the queue's bounds data is dropped: its
// sequence number is spent, so node's transport reports the hole as a gap when the next entry,
// or the sender's tick for a hole at the end of the queue, arrives. Send before Run queues
// only; Run's sender for node sends it.
func (t *Transport) Send(node string, data []byte) {
	d := t.dest(node)
	d.mu.Lock()
	d.seq++
	if len(d.queue) >= t.cfg.QueueItems || d.bytes+len(data) > t.cfg.QueueBytes {
		d.dropped++
	} else {
		d.queue = append(d.queue, payload{seq: d.seq, data: data})
		d.bytes += len(data)
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dest) settleLocked(seq uint64) {
	if seq > d.settled {
		d.settled = seq
		close(d.progress)
		d.progress = make(chan struct{})
	}
}

func (t *Transport) dest(node string) *dest {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dests[node]
	if d == nil {
		d = &dest{key: t.streamKey(node), wake: make(chan struct{}, 1), progress: make(chan struct{})}
		t.dests[node] = d
		if t.runCtx != nil {
			t.startSender(t.runCtx, d)
		}
	}
	return d
}

// startSender runs d's sender; t.mu is held.
func (t *Transport) startSender(ctx context.Context, d *dest) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.send(ctx, d)
	}()
}

// Flush returns once everything Sent before it is in its destination's stream, or dropped
// (and so reported as a gap there), or ctx ends.
func (t *Transport) Flush(ctx context.Context) error {
	t.mu.Lock()
	ds := make([]*dest, 0, len(t.dests))
	for _, d := range t.dests {
		ds = append(ds, d)
	}
	t.mu.Unlock()
	for _, d := range ds {
		d.mu.Lock()
		want := d.seq
		for d.settled < want {
			ch := d.progress
			d.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			d.mu.Lock()
		}
		d.mu.Unlock()
	}
	return nil
}

// Dropped returns how many payloads for node its queue's bounds dropped.
func (t *Transport) Dropped(node string) uint64 {
	t.mu.Lock()
	d := t.dests[node]
	t.mu.Unlock()
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// send is one destination's sender: it takes a batch off the queue and appends it in order,
// retrying with backoff while Redis fails (the queue, bounded, absorbs the wait). When payloads
// at the end of the queue were dropped, it appends a tick carrying the last spent sequence
// number, so the receiver learns of the hole without waiting for another payload.
func (t *Transport) send(ctx context.Context, d *dest) {
	backoff := 50 * time.Millisecond
	for {
		d.mu.Lock()
		n := min(len(d.queue), t.cfg.Batch)
		batch := append([]payload(nil), d.queue[:n]...)
		tail, sent := d.seq, d.sent
		d.mu.Unlock()
		tick := n == 0 && tail > sent
		if n == 0 && !tick {
			select {
			case <-ctx.Done():
				return
			case <-d.wake:
				continue
			}
		}
		cmds := make(rueidis.Commands, 0, n+1)
		for _, p := range batch {
			cmds = append(cmds, t.xadd(d.key, p.seq, "d", rueidis.BinaryString(p.data)))
		}
		if tick {
			cmds = append(cmds, t.xadd(d.key, tail, "t", "1"))
		}
		var err error
		for _, r := range t.c.rc.DoMulti(ctx, cmds...) {
			// A nil reply is NOMKSTREAM finding no stream: the node is gone, or Redis lost
			// its stream, which its reader reports. Either way the payload is spent.
			if e := r.Error(); e != nil && !rueidis.IsRedisNil(e) {
				err = e
				break
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Warn("transport send", slog.String("key", d.key), slog.Any("err", err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue // the whole batch again: the receiver skips sequence numbers it has seen
		}
		backoff = 50 * time.Millisecond
		d.mu.Lock()
		if tick {
			d.sent = tail
		} else {
			for _, p := range batch {
				d.bytes -= len(p.data)
			}
			d.queue = d.queue[n:]
			d.sent = batch[n-1].seq
		}
		d.settleLocked(d.sent)
		d.mu.Unlock()
	}
}

// xadd starts the append of one entry, sequence number seq, to a destination's stream. It
// never creates the stream (NOMKSTREAM): only its reader does.
// field and value are the entry's last field: "d" and the payload, or "t" for a tick.
func (t *Transport) xadd(key string, seq uint64, field, value string) rueidis.Completed {
	return t.c.rc.B().Xadd().Key(key).Nomkstream().Maxlen().Almost().Threshold(strconv.FormatInt(t.cfg.MaxLen, 10)).
		Id("*").FieldValue().FieldValue("p", t.cfg.Node).FieldValue("i", t.inc).FieldValue("q", strconv.FormatUint(seq, 10)).
		FieldValue(field, value).Build()
}

// Run reads this node's stream into r and runs the senders, until ctx ends. It returns only
// when every goroutine it started has ended. Run may be called again after it returned: the
// reader goes on from the last entry it read, so what arrived meanwhile is delivered, or, if
// the stream was trimmed or lost meanwhile, reported as a gap.
func (t *Transport) Run(ctx context.Context, r Receiver) error {
	t.mu.Lock()
	if t.runCtx != nil {
		t.mu.Unlock()
		return errors.New("redis transport: already running")
	}
	t.runCtx = ctx
	for _, d := range t.dests {
		t.startSender(ctx, d)
	}
	t.mu.Unlock()
	err := t.read(ctx, r)
	// No sender starts once runCtx is cleared, so none is added while Wait runs.
	t.mu.Lock()
	t.runCtx = nil
	t.mu.Unlock()
	t.wg.Wait()
	return err
}

// read is the reader: it keeps this node's stream alive, and hands each entry to r in order.
func (t *Transport) read(ctx context.Context, r Receiver) error {
	key := t.streamKey(t.cfg.Node)
	backoff := 50 * time.Millisecond
	fail := func(op string, err error) {
		t.log.Warn("transport read", slog.String("op", op), slog.String("key", key), slog.Any("err", err))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	for ctx.Err() == nil {
		// The stream exists while its reader lives: producers never create one. Finding it
		// gone after reading from it means whatever was in it, or sent to it since, is lost.
		alive, err := t.c.rc.Do(ctx, t.c.rc.B().Pexpire().Key(key).Milliseconds(t.cfg.StreamTTL.Milliseconds()).Build()).AsBool()
		if err != nil {
			fail("pexpire", err)
			continue
		}
		if !alive {
			if t.lastID != "" {
				for from := range t.seen {
					r.Gap(from, GapStreamGone)
				}
			}
			// A marker entry creates the stream; reading starts after it.
			id, err := t.c.rc.Do(ctx, t.c.rc.B().Xadd().Key(key).Id("*").FieldValue().FieldValue("p", "").Build()).ToString()
			if err == nil {
				err = t.c.rc.Do(ctx, t.c.rc.B().Pexpire().Key(key).Milliseconds(t.cfg.StreamTTL.Milliseconds()).Build()).Error()
			}
			if err != nil {
				fail("create", err)
				continue
			}
			t.lastID = id
		}
		res, err := t.c.rc.Do(ctx, t.c.rc.B().Xread().Count(int64(t.cfg.Batch)).Block(t.cfg.Block.Milliseconds()).Streams().Key(key).Id(t.lastID).Build()).AsXRead()
		if rueidis.IsRedisNil(err) {
			continue // nothing within Block
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fail("xread", err)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, e := range res[key] {
			t.lastID = e.ID
			t.entry(r, e.FieldValues)
		}
	}
	return nil
}

// entry checks one entry's sequence against its producer's last and hands it over.
func (t *Transport) entry(r Receiver, f map[string]string) {
	from := f["p"]
	if from == "" {
		return // a stream marker
	}
	seq, err := strconv.ParseUint(f["q"], 10, 64)
	if err != nil {
		t.log.Warn("transport entry without a sequence number", slog.String("from", from))
		r.Gap(from, GapLost)
		return
	}
	last, known := t.seen[from]
	switch {
	case !known:
		// Node ids are per process, so this reader's stream is new to every producer: the
		// first entry from one is its sequence number 1, or something before it was lost.
		if seq != 1 {
			r.Gap(from, GapLost)
		}
	case last.inc != f["i"]:
		r.Gap(from, GapRestart)
	case seq <= last.seq:
		return // a batch sent again after an error: already delivered
	case seq != last.seq+1:
		r.Gap(from, GapLost)
	}
	t.seen[from] = producerSeen{inc: f["i"], seq: seq}
	if f["t"] == "" {
		r.Receive(from, []byte(f["d"]))
	}
}

// String names the transport for logs.
func (t *Transport) String() string { return fmt.Sprintf("transport %s/%s", t.cfg.Node, t.inc) }
