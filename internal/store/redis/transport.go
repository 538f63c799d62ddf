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
	"sync/atomic"
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
	// restarted): the receiver resyncs what from feeds with upstream_gap. A hole is reported at
	// least once, and may be reported twice (by two of the ways of finding it).
	Gap(from string, reason GapReason)
}

// GapReason is why a Transport reports a gap. The same constant is the log attribute and the
// metric label.
type GapReason string

const (
	// GapLost: sequence numbers from a producer jumped, or its tick named numbers this node
	// never read: its queue overflowed, its destination stream was missing, or entries were
	// trimmed or lost before this node read them.
	GapLost GapReason = "transport_lost"
	// GapRestart: a producer came back as a new incarnation; what its last one still held is
	// gone.
	GapRestart GapReason = "producer_restart"
	// GapStreamGone: this node's stream vanished (Redis restarted or lost it); anything sent to
	// it meanwhile is gone, from every producer.
	GapStreamGone GapReason = "stream_gone"
)

// GapReasons lists every GapReason, for metrics.
func GapReasons() []GapReason { return []GapReason{GapLost, GapRestart, GapStreamGone} }

// DropReason is why a Transport's sender dropped a payload before it reached its destination's
// stream. The same constant is the log attribute and the metric label. A dropped payload's
// sequence number is spent, so its destination reports the hole as a gap (GapLost).
type DropReason string

const (
	// DropQueueFull: the destination's queue was at one of its bounds (QueueItems, QueueBytes):
	// Redis was slow or unreachable for longer than the queue absorbs.
	DropQueueFull DropReason = "queue_full"
	// DropNoStream: the destination's stream did not exist (NOMKSTREAM appended nothing): the
	// node is gone and its stream expired, or Redis lost the stream and its reader had not made
	// it again yet.
	DropNoStream DropReason = "no_stream"
)

// DropReasons lists every DropReason, for metrics.
func DropReasons() []DropReason { return []DropReason{DropQueueFull, DropNoStream} }

// TransportConfig configures a Transport. Node is required; every other zero field is its
// default.
type TransportConfig struct {
	// Node is this node's id: it reads the stream of that name and signs what it sends. It must
	// be new per process (a UUIDv7, say): a producer numbers what it sends to a node from 1.
	Node string
	// MaxLen bounds each node's stream, in entries (trimmed approximately, never below it).
	// At least MinMaxLen. Default 100000.
	MaxLen int64
	// QueueItems and QueueBytes bound what waits to be sent to one node. Past either, a
	// payload is dropped; its sequence number is spent, so the receiver reports the hole as a
	// gap. Default 10000 payloads and 16 MiB.
	QueueItems int
	QueueBytes int
	// Batch is how many payloads one round trip sends, and how many entries one read takes.
	// At most MinMaxLen. Default 256.
	Batch int
	// Block is how long a read waits for new entries before it looks at its stream again.
	// At least 1ms. Default 2s.
	Block time.Duration
	// StreamTTL is how long a node's stream outlives its reader: a dead node's stream goes,
	// and producers (which never create a stream) stop adding to it. It is also how long a
	// sender goes on ticking to a destination after its last Send there. At least 4 Block.
	// Default 1 minute.
	StreamTTL time.Duration
	// Heartbeat is how often a sender idle toward a destination appends a tick carrying the
	// last sequence number it spent there, for StreamTTL after its last Send to it: a reader
	// that never read that producer's last entries (trimmed before it read them) learns of the
	// hole from the tick, although the producer sends nothing more. Less than StreamTTL.
	// Default 1s.
	Heartbeat time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// MinMaxLen is the least TransportConfig.MaxLen and the most TransportConfig.Batch, so that
// whatever the nodes' settings, a stream trimmed holds at least one full read of any reader: a
// reader checks for a trim past its last entry only after a full read (see Transport.read).
const MinMaxLen = 1024

// Transport carries opaque payloads from this node to others, once per destination node, over
// one Redis stream per node. Order holds per (producer, destination): one goroutine per
// destination sends its queue in order. Loss is never silent: each entry carries its
// producer's incarnation and a sequence number per (producer incarnation, destination).
//
// Run owns every goroutine: one reader, and one sender per destination, started on first Send.
// Locks: mu, then a dest's mu, are never held together; neither is held across a Redis call.
type Transport struct {
	c     *Client         // read-only
	cfg   TransportConfig // read-only
	inc   string          // read-only: this incarnation, random, new per Transport
	log   *slog.Logger    // read-only
	stats transportCounters

	mu     sync.Mutex
	dests  map[string]*dest // guarded by mu; a dest, once made, stays
	runCtx context.Context  // guarded by mu; Run's while it runs, nil otherwise
	wg     sync.WaitGroup   // the senders

	// Owned by the reader goroutine (one Run at a time); kept from one Run to the next.
	lastID  string                  // the last entry read, or the marker reading starts after
	seen    map[string]producerSeen // each producer's last entry read
	renewed time.Time               // when the stream's TTL was last renewed
	// live is whether the reader last found its stream there (or made it again) with no
	// failure since: while it is false, what other nodes send this one may be dropped.
	live atomic.Bool
}

type producerSeen struct {
	inc string
	seq uint64
}

// dest is the queue to one node, and its sender's progress.
type dest struct {
	key  string        // read-only
	wake chan struct{} // capacity 1: Send nudges the sender

	mu       sync.Mutex
	queue    []payload     // guarded by mu
	bytes    int           // guarded by mu: the bytes of queue
	seq      uint64        // guarded by mu: the last sequence number spent
	spentAt  time.Time     // guarded by mu: when seq was spent; the heartbeat runs for StreamTTL after
	sent     uint64        // guarded by mu: the last sequence number in the stream (a payload or a tick)
	settled  uint64        // guarded by mu: every seq up to this is in the stream or told of by a later one
	progress chan struct{} // guarded by mu: closed and replaced whenever settled moves
	dropped  uint64        // guarded by mu: payloads dropped, for every reason
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
	// Redis takes whole milliseconds, and BLOCK 0 waits for ever.
	cfg.Block = max(cfg.Block, time.Millisecond)
	if cfg.StreamTTL <= 0 {
		cfg.StreamTTL = time.Minute
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The reader renews its stream's TTL between reads that block up to Block, and renews it
	// a quarter of StreamTTL after it last did: a shorter TTL would let a live node's stream
	// expire.
	if cfg.StreamTTL < 4*cfg.Block {
		return nil, fmt.Errorf("redis transport: stream TTL %s is under 4 × block %s: a live node's stream could expire between reads; raise the TTL or lower the block", cfg.StreamTTL, cfg.Block)
	}
	if cfg.MaxLen < MinMaxLen {
		return nil, fmt.Errorf("redis transport: max length %d is under %d: a trimmed stream must hold a full read; raise it", cfg.MaxLen, MinMaxLen)
	}
	if cfg.Batch > MinMaxLen {
		return nil, fmt.Errorf("redis transport: batch %d is over %d: a trimmed stream must hold a full read; lower it", cfg.Batch, MinMaxLen)
	}
	if cfg.Heartbeat >= cfg.StreamTTL {
		return nil, fmt.Errorf("redis transport: heartbeat %s is not under stream TTL %s: no tick would ever go; lower the heartbeat", cfg.Heartbeat, cfg.StreamTTL)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Transport{c: c, cfg: cfg, inc: hex.EncodeToString(b[:]), log: cfg.Logger, dests: map[string]*dest{}, seen: map[string]producerSeen{}}, nil
}

func (t *Transport) streamKey(node string) string { return t.c.key("x", "{n:"+node+"}") }

// Send queues data for node and returns at once. Past the queue's bounds data is dropped: its
// sequence number is spent, so node's transport reports the hole as a gap when the next entry,
// or the sender's tick, arrives. Send before Run queues only; Run's sender for node sends it.
// data must not change after Send.
func (t *Transport) Send(node string, data []byte) {
	d := t.dest(node)
	now := time.Now()
	d.mu.Lock()
	d.seq++
	d.spentAt = now
	dropped := len(d.queue) >= t.cfg.QueueItems || d.bytes+len(data) > t.cfg.QueueBytes
	if dropped {
		d.dropped++
	} else {
		d.queue = append(d.queue, payload{seq: d.seq, data: data})
		d.bytes += len(data)
	}
	d.mu.Unlock()
	if dropped {
		t.stats.drop(DropQueueFull, 1)
	}
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

// destList returns every dest made so far.
func (t *Transport) destList() []*dest {
	t.mu.Lock()
	defer t.mu.Unlock()
	ds := make([]*dest, 0, len(t.dests))
	for _, d := range t.dests {
		ds = append(ds, d)
	}
	return ds
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
	for _, d := range t.destList() {
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

// Dropped returns how many payloads for node were dropped, for any DropReason.
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
// retrying with backoff while Redis fails (the queue, bounded, absorbs the wait). With the
// queue empty it appends a tick, carrying the last spent sequence number, when payloads at the
// end of the queue were dropped (so the receiver learns of the hole without waiting for another
// payload) and every Heartbeat for StreamTTL after the last Send (so a receiver that lost the
// producer's last entries to a trim learns of it although nothing more is sent).
func (t *Transport) send(ctx context.Context, d *dest) {
	out := outage{log: t.log, failures: &t.stats.failures, what: "transport send", attrs: []any{slog.String("key", d.key)}}
	backoff := minBackoff
	beat := false
	for {
		d.mu.Lock()
		n := min(len(d.queue), t.cfg.Batch)
		batch := append([]payload(nil), d.queue[:n]...)
		tail, sent, spentAt := d.seq, d.sent, d.spentAt
		d.mu.Unlock()
		// With the queue empty every spent number is in the stream or dropped, so a tick
		// carrying tail hides no payload still to come.
		tick := n == 0 && (tail > sent || beat)
		if n == 0 && !tick {
			beat = t.idle(ctx, d, spentAt)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		cmds := make(rueidis.Commands, 0, n+1)
		for _, p := range batch {
			cmds = append(cmds, t.xadd(d.key, p.seq, "d", rueidis.BinaryString(p.data)))
		}
		if tick {
			cmds = append(cmds, t.xadd(d.key, tail, "t", "1"))
		}
		res := t.c.rc.DoMulti(ctx, cmds...)
		t.stats.commands.Add(uint64(len(cmds)))
		t.stats.roundTrips.Add(1)
		var err error
		for _, r := range res {
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
			out.fail(err)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue // the whole batch again: the receiver skips sequence numbers it has seen
		}
		out.ok()
		backoff = minBackoff
		beat = false
		var delivered, deliveredBytes, lost uint64
		for i, p := range batch {
			if rueidis.IsRedisNil(res[i].Error()) {
				lost++
			} else {
				delivered++
				deliveredBytes += uint64(len(p.data))
			}
		}
		t.stats.sent.Add(delivered)
		t.stats.sentBytes.Add(deliveredBytes)
		t.stats.drop(DropNoStream, lost)
		if tick && !rueidis.IsRedisNil(res[n].Error()) {
			t.stats.ticks.Add(1)
		}
		d.mu.Lock()
		d.dropped += lost
		if tick {
			d.sent = tail
		} else {
			for _, p := range batch {
				d.bytes -= len(p.data)
			}
			// The slice keeps its array until append moves it: let the payloads go now.
			clear(d.queue[:n])
			d.queue = d.queue[n:]
			d.sent = batch[n-1].seq
		}
		d.settleLocked(d.sent)
		d.mu.Unlock()
	}
}

// idle waits, the queue being empty, for a Send, or for the next heartbeat while d spent a
// sequence number within StreamTTL. It reports whether the heartbeat is due.
func (t *Transport) idle(ctx context.Context, d *dest, spentAt time.Time) bool {
	var beat <-chan time.Time
	if !spentAt.IsZero() && time.Since(spentAt) < t.cfg.StreamTTL {
		tm := time.NewTimer(t.cfg.Heartbeat)
		defer tm.Stop()
		beat = tm.C
	}
	select {
	case <-ctx.Done():
	case <-d.wake:
	case <-beat:
		return true
	}
	return false
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
// the stream was trimmed or lost meanwhile, reported as a gap. While Redis is unreachable Run
// keeps trying, with backoff, logging the outage's start and end.
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
//
// It renews the stream's TTL, which also tells whether the stream is still there, a quarter of
// StreamTTL after it last did, and before the first read after a read that found nothing or
// failed: a read that returns entries shows the stream is there, since nobody but this reader
// makes it again once gone. So a busy reader costs one command per read, and a vanished
// stream is found within Block.
func (t *Transport) read(ctx context.Context, r Receiver) error {
	key := t.streamKey(t.cfg.Node)
	out := outage{log: t.log, failures: &t.stats.failures, what: "transport read", attrs: []any{slog.String("key", key)}}
	backoff := minBackoff
	fail := func(err error) {
		t.live.Store(false)
		out.fail(err)
		sleep(ctx, backoff)
		backoff = min(2*backoff, maxBackoff)
	}
	check := true
	for ctx.Err() == nil {
		if check || time.Since(t.renewed) >= t.cfg.StreamTTL/4 {
			if err := t.renew(ctx, r, key); err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				continue
			}
			check = false
		}
		prev := t.lastID
		res, err := t.c.rc.Do(ctx, t.c.rc.B().Xread().Count(int64(t.cfg.Batch)).Block(t.cfg.Block.Milliseconds()).Streams().Key(key).Id(prev).Build()).AsXRead()
		t.stats.commands.Add(1)
		t.stats.roundTrips.Add(1)
		if rueidis.IsRedisNil(err) {
			out.ok()
			check = true // nothing within Block: is the stream still there?
			continue
		}
		t.live.Store(true)
		if err != nil {
			check = true
			if ctx.Err() == nil {
				fail(fmt.Errorf("xread: %w", err))
			}
			continue
		}
		out.ok()
		backoff = minBackoff
		entries := res[key]
		var covered map[string]bool
		// A trim keeps at least the trimming producer's MaxLen entries, all after any entry
		// it removed, and every MaxLen is at least every Batch: a read that follows a trim
		// past prev is a full one. A read that is not full needs no check.
		if len(entries) >= t.cfg.Batch && t.trimmed(ctx, key, prev) {
			// Entries between prev and the first one read may have been trimmed unread:
			// every producer known may have lost some. The gap reported now covers, for
			// each, the jump its next entry in this batch shows.
			covered = make(map[string]bool, len(t.seen))
			for from := range t.seen {
				t.gap(r, from, GapLost)
				covered[from] = true
			}
		}
		for _, e := range entries {
			t.lastID = e.ID
			t.entry(r, e.FieldValues, covered)
		}
	}
	return nil
}

// renew renews the stream's TTL. If the stream is gone (Redis lost it, or this node was away
// past StreamTTL) after this reader read from it, every producer it knows gets a GapStreamGone,
// once: then renew makes the stream again, with a marker entry reading starts after. A stream
// this reader did not make (a Transport before it in this process under the same node id)
// is joined at its end.
func (t *Transport) renew(ctx context.Context, r Receiver, key string) error {
	ttl := t.cfg.StreamTTL.Milliseconds()
	alive, err := t.c.rc.Do(ctx, t.c.rc.B().Pexpire().Key(key).Milliseconds(ttl).Build()).AsBool()
	t.stats.commands.Add(1)
	t.stats.roundTrips.Add(1)
	if err != nil {
		return fmt.Errorf("pexpire: %w", err)
	}
	if alive && t.lastID != "" {
		t.renewed = time.Now()
		t.live.Store(true)
		return nil
	}
	if alive {
		t.log.Warn("transport stream exists before its reader made it: is another process using this node id?", slog.String("key", key))
	}
	res := t.c.rc.DoMulti(ctx,
		t.c.rc.B().Xadd().Key(key).Id("*").FieldValue().FieldValue("p", "").Build(),
		t.c.rc.B().Pexpire().Key(key).Milliseconds(ttl).Build())
	t.stats.commands.Add(2)
	t.stats.roundTrips.Add(1)
	id, err := res[0].ToString()
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if !alive {
		// Told once the stream is there again: a create that failed is tried again, and
		// one loss is one gap.
		for from := range t.seen {
			t.gap(r, from, GapStreamGone)
		}
	}
	t.lastID = id
	if err := res[1].Error(); err != nil {
		return fmt.Errorf("create: pexpire: %w", err) // the caller renews again before reading
	}
	t.renewed = time.Now()
	t.live.Store(true)
	return nil
}

// Live reports whether this node's stream was last found there, or made again, with no read
// failing since: while it is not, what other nodes send here may be dropped (and reported as
// gaps), so a node is not ready. False until Run's first check.
func (t *Transport) Live() bool { return t.live.Load() }

// trimmed reports whether entry id is gone from the stream. MAXLEN trims a stream from its
// head, so if id is still there, no entry after it was trimmed before the read that followed
// it; if it is gone, some may have been. A failed check counts as trimmed: a gap too many costs
// a resync, a gap too few is silence.
func (t *Transport) trimmed(ctx context.Context, key, id string) bool {
	es, err := t.c.rc.Do(ctx, t.c.rc.B().Xrange().Key(key).Start(id).End(id).Count(1).Build()).AsXRange()
	t.stats.commands.Add(1)
	t.stats.roundTrips.Add(1)
	if err != nil {
		t.log.Warn("transport trim check", slog.String("key", key), slog.Any("err", err))
		return true
	}
	return len(es) == 0
}

// entry checks one entry's sequence number against its producer's last and hands it over.
// covered holds the producers whose next entry's gap was already reported.
func (t *Transport) entry(r Receiver, f map[string]string, covered map[string]bool) {
	from := f["p"]
	if from == "" {
		return // a stream marker
	}
	seq, err := strconv.ParseUint(f["q"], 10, 64)
	if err != nil {
		t.log.Warn("transport entry without a sequence number", slog.String("from", from))
		t.gap(r, from, GapLost)
		return
	}
	inc, tick := f["i"], f["t"] != ""
	last, known := t.seen[from]
	if known && last.inc == inc && seq <= last.seq {
		return // a batch sent again after an error, or a tick with nothing new
	}
	var reason GapReason
	switch {
	case known && last.inc != inc:
		reason = GapRestart
	case tick:
		// A tick spends no number: it says every number up to seq was spent, and this reader
		// has read none past last.seq (0 for a producer new to it).
		reason = GapLost
	case seq != last.seq+1:
		// Node ids are per process, so this reader's stream is new to every producer: the
		// first entry from one is its sequence number 1, or something before it was lost.
		reason = GapLost
	}
	if reason != "" && !covered[from] {
		t.gap(r, from, reason)
	}
	delete(covered, from)
	t.seen[from] = producerSeen{inc: inc, seq: seq}
	if !tick {
		data := f["d"]
		t.stats.received.Add(1)
		t.stats.receivedBytes.Add(uint64(len(data)))
		r.Receive(from, []byte(data))
	}
}

// gap reports and counts one gap.
func (t *Transport) gap(r Receiver, from string, reason GapReason) {
	t.stats.gap(reason)
	r.Gap(from, reason)
}

// String names the transport for logs.
func (t *Transport) String() string { return fmt.Sprintf("transport %s/%s", t.cfg.Node, t.inc) }

// Backoff between tries while Redis fails.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// sleep waits d, or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// outage keeps one goroutine's log of a Redis outage to two lines: its first failure, at Warn,
// and the success that ends it, at Info; the failures between go at Debug, since a goroutine
// retries every few seconds for as long as Redis is away. Owned by that goroutine.
type outage struct {
	log      *slog.Logger
	failures *atomic.Uint64 // the transport's count of failed round trips
	what     string
	attrs    []any
	since    time.Time // zero when there is no outage
	fails    int
}

func (o *outage) fail(err error) {
	o.failures.Add(1)
	o.fails++
	if o.since.IsZero() {
		o.since = time.Now()
		o.log.Warn(o.what+": redis failed; retrying", append(o.attrs, slog.Any("err", err))...)
		return
	}
	o.log.Debug(o.what+": redis failed again", append(o.attrs, slog.Int("failures", o.fails), slog.Any("err", err))...)
}

func (o *outage) ok() {
	if o.since.IsZero() {
		return
	}
	o.log.Info(o.what+": redis answers again", append(o.attrs, slog.Int("failures", o.fails), slog.Duration("after", time.Since(o.since)))...)
	o.since, o.fails = time.Time{}, 0
}
