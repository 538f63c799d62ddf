package cluster

import (
	"context"
	"errors"
	"github.com/heraldrt/herald/internal/ratelog"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/stream"
)

// Transport carries payloads to other nodes: store/redis.Transport. Send queues and never
// blocks; Flush returns once everything queued before it is in the destinations' streams or
// was dropped (a drop the destination reports as a gap).
type Transport interface {
	Send(node string, data []byte)
	Flush(ctx context.Context) error
}

// Hub is this node's channel hub, as the receiving side needs it.
type Hub interface {
	// Deliver hands a publication another node took to this node's subscriptions, in offset
	// order; an error means it could not, and the node calls Lost.
	Deliver(m *stream.Message) error
	// Lost says a publication another node took was not handed on here: its offset is
	// reported lost to the channel's subscribers once the order wait passes without it.
	Lost(m *stream.Message)
	// Verify makes sure every offset each channel's broker has given reaches this node, or is
	// reported lost: after a loss on the way, with nothing published after it.
	Verify()
}

// Presence is this node's presence, as the receiving side needs it: it hands a join or leave
// another node made to this node's presence subscribers of the channel.
type Presence interface {
	Apply(channel string, kind stream.PresenceKind, m stream.Member)
}

// Durable is this node's durable subscriptions, as the receiving side needs them.
type Durable interface {
	// Receive hands a delivery another node's step made to connection conn, bound here.
	Receive(key durable.Key, conn string, ents []durable.Entry)
	// Lost says that payloads from node from were lost on the way (among them, perhaps,
	// durable deliveries).
	Lost(from string)
}

// Tables is this node's router, as the receiving side needs it.
type Tables interface {
	// Accept routes a transaction (with only the events this node watches) to this node's
	// subscriptions.
	Accept(ctx context.Context, txn *change.Txn) error
	// Stale tells every table subscription on this node that its view went stale after the
	// last transaction it was handed, for reason (a loss on the way from the replicator).
	Stale(reason stream.Reason)
	// Tokens appends the interest tokens a change is routed by (router.Router.Tokens); on an
	// error the change goes to every node that holds the table.
	Tokens(ctx context.Context, e *change.Event, dst []string) ([]string, error)
}

// Config configures a Node. Node, Interest and Transport are required.
type Config struct {
	// Node is this node's id: its rows name it, and other nodes send to it by it.
	Node      string
	Interest  interest.Store
	Transport Transport
	// Hub and Tables receive what other nodes send; Tables is nil without a changefeed.
	Hub      Hub
	Tables   Tables
	Presence Presence // nil: presence events from other nodes are dropped
	Durable  Durable  // nil: durable deliveries from other nodes are dropped
	// History, on the replicator, is where Replicate records each transaction for the tables it
	// touched, for resumes on any node (internal/history). nil: none is kept.
	History history.Store
	// RowTTL is the interest store's TTL: Run renews this node's rows every RowTTL/4.
	// Default interest.DefaultTTL.
	RowTTL time.Duration
	// QueueItems and QueueBytes bound the publications waiting to be routed to other nodes,
	// and what other nodes sent waiting to be handed on here. Default 16384 and 16 MiB.
	QueueItems int
	QueueBytes int
	// Timeout bounds each interest call a subscription makes. Default 5s.
	Timeout time.Duration
	// FencePrefix, when set, is the prefix of the logical messages a node's table snapshot
	// emits to move its stream past the snapshot (a fence), whose content is "<node>.<n>":
	// the replicator sends each to the node it names, after everything it routed there
	// before, so that node's hand-offs pass it too.
	FencePrefix string
	Logger      *slog.Logger
}

// Node is this node's share of the cross-node fan-out: it files the interest of its
// subscriptions, routes its publications (and, on the replicator, the transactions) to the
// nodes whose interest they hit, and hands what other nodes send it to its hub and router.
//
// Goroutines, all owned by Run: the router of publications (one, so a channel's publications
// leave in the order their offsets were taken), the receiver (one, so what one producer sent
// is handed on in order), and the renewer of rows.
type Node struct {
	cfg Config
	log *slog.Logger
	// warn logs the failures that repeat once per item while Redis does not answer, each
	// site at most once per interval with the count held back.
	warn *ratelog.Limiter

	mu   sync.Mutex
	held map[string]*owned // guarded by mu: the rows this node filed, by owner
	seq  atomic.Uint64     // names subscriptions: unique on this node

	out *queue[outItem] // publications and presence events to route, in the order they were made
	in  *queue[inbound] // payloads received

	// lostMu guards lost: by channel, the last publication this node took and could not route
	// (its queue full, or its interest unread), to be reported to the nodes holding the
	// channel as lost. A flush item in out asks the router to send them; one is queued when
	// lost goes from empty to not. At most maxLostChannels channels; past it one is logged
	// and not reported (the next publication of its channel shows the hole).
	lostMu sync.Mutex
	lost   map[string]*stream.Message

	renewNow chan struct{} // one token: renew at once (the bus reported a loss: Redis may have lost the rows too)
	// unsure is set when Redis may have lost this node's rows (an outage, a lost stream) and
	// cleared by the first renewal after it that checked every owner without an error: until
	// then the node is not ready (Renewing).
	unsure atomic.Bool

	cache  map[string]*ownerCache // owned by the publication router goroutine
	tcache map[string]*ownerCache // owned by Replicate's caller, the changefeed's sink goroutine

	recorded recorded // what Replicate knows of the tables' histories

	stats counters
}

// owned is what this node filed under one owner, to renew and to file again after a loss.
type owned struct {
	rows map[string]interest.Row // by Sub
}

// ownerCache is the rows of an owner's tokens as read at one generation.
type ownerCache struct {
	gen   uint64
	nodes map[string][]string // token -> the distinct nodes its rows name
}

// outItem is a publication or a presence event to route.
type outItem struct {
	m    *stream.Message
	pres *wirePresence
	// lost says m is a report that the publication at its position was not routed (no data):
	// the receivers report its offset lost unless it arrives (channel.Hub.Lost).
	lost bool
	// flushLost asks the router to route the reports in Node.lost; the item has nothing else.
	flushLost bool
}

// maxLostChannels bounds the channels whose lost publications wait to be reported.
const maxLostChannels = 16384

type inbound struct {
	from string
	data []byte
	gap  GapReason // set for a gap report; data is nil
}

// GapReason is why a producer's payloads were lost on the way here (the transport's reason).
type GapReason string

type counters struct {
	sent, received, dropped, gaps [kinds]atomic.Uint64
	lookups                       atomic.Uint64
}

// The kinds of payload, as metric labels.
const (
	KindChannel = iota
	KindTable
	KindPresence
	KindDurable
	kinds
)

// KindNames are the metric labels of the kinds.
var KindNames = [kinds]string{"channel", "table", "presence", "durable"}

// New returns a node; Run starts it.
func New(cfg Config) (*Node, error) {
	if cfg.Node == "" || cfg.Interest == nil || cfg.Transport == nil || cfg.Hub == nil {
		return nil, errors.New("cluster: Node, Interest, Transport and Hub are required")
	}
	if cfg.RowTTL <= 0 {
		cfg.RowTTL = interest.DefaultTTL
	}
	if cfg.QueueItems <= 0 {
		cfg.QueueItems = 16384
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 16 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Node{
		cfg: cfg, log: cfg.Logger, warn: ratelog.New(cfg.Logger, ratelog.Config{}),
		held:     map[string]*owned{},
		renewNow: make(chan struct{}, 1),
		out:      newQueue[outItem](cfg.QueueItems, cfg.QueueBytes),
		in:       newQueue[inbound](cfg.QueueItems, cfg.QueueBytes),
		cache:    map[string]*ownerCache{},
		tcache:   map[string]*ownerCache{},
	}, nil
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.Node }

// Watch files a subscription's interest under owner and token for identity, and returns the
// function that removes it. It refuses past the identity's limit (too_many_subscriptions).
func (n *Node) Watch(ctx context.Context, owner, token, identity string) (release func(), err error) {
	sub := strconv.FormatUint(n.seq.Add(1), 36)
	if identity == "" {
		// Anonymous connections are not one identity: the limit per identity would make them
		// share one budget across the cluster. Each counts alone (the per-connection limit still
		// bounds them).
		identity = "~" + n.cfg.Node + "/" + sub
	}
	// The node is the socket: its liveness is what the rows' deadlines follow, renewed once per
	// owner for all of its subscriptions, and a subscription's own row goes when it ends.
	r := interest.Row{Token: token, Socket: n.cfg.Node, Sub: sub, Identity: identity, Node: n.cfg.Node}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	if _, err := n.cfg.Interest.Add(ctx, owner, r); err != nil {
		return nil, err
	}
	n.mu.Lock()
	o := n.held[owner]
	if o == nil {
		o = &owned{rows: map[string]interest.Row{}}
		n.held[owner] = o
	}
	o.rows[r.Sub] = r
	n.mu.Unlock()
	return sync.OnceFunc(func() { n.unwatch(owner, r.Sub) }), nil
}

func (n *Node) unwatch(owner, sub string) {
	n.mu.Lock()
	if o := n.held[owner]; o != nil {
		delete(o.rows, sub)
		if len(o.rows) == 0 {
			delete(n.held, owner)
		}
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timeout)
	defer cancel()
	if _, err := n.cfg.Interest.Remove(ctx, owner, n.cfg.Node, sub); err != nil {
		// The row stays until this node stops renewing it; items it draws are dropped here.
		n.warn.Warn("unwatch", "cluster: remove a subscription's interest", slog.String("owner", owner), slog.Any("err", err))
	}
}

// Mark returns the position of the last item routed under owner before now (0 when none):
// read after Watch, every item past it reaches this node.
func (n *Node) Mark(ctx context.Context, owner string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	return n.cfg.Interest.Mark(ctx, owner)
}

// Forward queues a publication this node took for the nodes whose interest it hits
// (channel.Remote). A full queue drops it, and the nodes holding its channel are told its
// position (lose), so they report the hole even when nothing is published after it.
func (n *Node) Forward(m *stream.Message) {
	if !n.out.push(outItem{m: m}, len(m.Channel)+len(m.Event)+len(m.Data)+64) {
		n.stats.dropped[KindChannel].Add(1)
		n.lose(m)
	}
}

// lose notes that publication m was not routed, to be reported to the nodes holding its
// channel: only its channel and position are kept, the last per channel, since a receiver
// expects every offset up to the one it is told of.
func (n *Node) lose(m *stream.Message) {
	n.lostMu.Lock()
	first := len(n.lost) == 0
	prev, had := n.lost[m.Channel]
	if !had && len(n.lost) >= maxLostChannels {
		n.lostMu.Unlock()
		n.warn.Warn("lose", "cluster: too many channels' lost publications wait to be reported; this one shows as a hole when its channel's next publication arrives",
			slog.String("channel", m.Channel), slog.Int("channels", maxLostChannels))
		return
	}
	if !had || prev.Pos.Epoch != m.Pos.Epoch || prev.Pos.Offset < m.Pos.Offset {
		if n.lost == nil {
			n.lost = map[string]*stream.Message{}
		}
		n.lost[m.Channel] = &stream.Message{Channel: m.Channel, Pos: m.Pos}
	}
	n.lostMu.Unlock()
	if first {
		n.out.force(outItem{flushLost: true})
	}
}

// takeLost returns the lost publications' reports, as items to route, and empties the set.
func (n *Node) takeLost() []outItem {
	n.lostMu.Lock()
	defer n.lostMu.Unlock()
	out := make([]outItem, 0, len(n.lost))
	for _, m := range n.lost {
		out = append(out, outItem{m: m, lost: true})
	}
	n.lost = nil
	return out
}

// Relay queues a presence join or leave this node made for the nodes that hold the channel
// exactly (its presence subscribers subscribe to it). A full queue drops it, counted: presence
// events have no position, so a lost one leaves other nodes' rosters stale until the member's
// next change (docs/OPERATIONS.md, Many nodes).
func (n *Node) Relay(channel string, kind stream.PresenceKind, m stream.Member) {
	if !n.out.push(outItem{pres: &wirePresence{Channel: channel, Kind: kind, Member: m}}, len(channel)+len(m.ID)+len(m.Meta)+64) {
		n.stats.dropped[KindPresence].Add(1)
	}
}

// Deliver sends a durable subscription's delivery to connection conn on node (durable.Relay).
// It goes straight to the transport, which queues it and never blocks: a full queue drops it,
// and the destination reports the loss (Durable.Lost there).
func (n *Node) Deliver(node string, key durable.Key, conn string, ents []durable.Entry) {
	data, err := encodeDurable(key, conn, ents)
	if err != nil {
		n.stats.dropped[KindDurable].Add(1)
		n.log.Error("cluster: a durable delivery does not encode", slog.String("key", key.String()), slog.Any("err", err))
		return
	}
	n.stats.sent[KindDurable].Add(1)
	n.cfg.Transport.Send(node, data)
}

// Receive queues a payload another node sent (the transport's reader calls it). A full queue
// drops it and reports the loss as a gap from that node.
func (n *Node) Receive(from string, data []byte) {
	if !n.in.push(inbound{from: from, data: data}, len(data)+64) {
		n.stats.dropped[kindOf(data)].Add(1)
		n.in.force(inbound{from: from, gap: "receive_queue_full"})
	}
}

// Gap queues the transport's report that payloads from node from were lost, and has this
// node's rows checked at once: a Redis that lost a stream may have lost them too.
func (n *Node) Gap(from string, reason GapReason) {
	n.in.force(inbound{from: from, gap: reason})
	n.RenewNow()
}

// RenewNow has this node's rows checked, and filed again where Redis lost them, at once, and
// retried until a check finds Redis answering: for an outage the caller saw (Redis did not
// answer a probe), as for a loss the transport reported. Until that check the node is
// Renewing.
func (n *Node) RenewNow() {
	n.unsure.Store(true)
	select {
	case n.renewNow <- struct{}{}:
	default:
	}
}

// Renewing reports whether Redis may have lost rows of this node that it has not checked and
// filed again yet: a node that says so is not ready, since what is routed meanwhile does not
// reach it.
func (n *Node) Renewing() bool { return n.unsure.Load() }

func kindOf(data []byte) int {
	switch {
	case len(data) > 0 && data[0] == kindTxn:
		return KindTable
	case len(data) > 0 && data[0] == kindPresence:
		return KindPresence
	case len(data) > 0 && data[0] == kindDurable:
		return KindDurable
	}
	return KindChannel
}

// Run routes, receives and renews until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); n.routeLoop(ctx) }()
	go func() { defer wg.Done(); n.receiveLoop(ctx) }()
	go func() { defer wg.Done(); n.renewLoop(ctx) }()
	<-ctx.Done()
	n.out.close()
	n.in.close()
	wg.Wait()
	return nil
}

// routeLoop routes this node's publications and presence events, a batch at a time: one probe
// per owner per batch (its generation, and which of the batch's tokens anyone watches), and
// the rows of a watched token read again only when the owner's generation moved.
func (n *Node) routeLoop(ctx context.Context) {
	for {
		taken, ok := n.out.take()
		if !ok {
			return
		}
		batch := taken
		for _, it := range taken {
			if it.flushLost {
				batch = append(slices.Clip(batch), n.takeLost()...)
			}
		}
		want := map[string][]string{} // owner -> the batch's tokens under it
		for _, it := range batch {
			for _, ot := range it.interest() {
				want[ot.owner] = append(want[ot.owner], ot.tokens...)
			}
		}
		probes := map[string]*probe{}
		for owner, tokens := range want {
			probes[owner] = n.probe(ctx, owner, tokens)
		}
		for _, it := range batch {
			n.routeItem(ctx, it, probes)
		}
		n.out.done(taken)
	}
}

// interest is the owners and tokens an item is routed by.
func (it outItem) interest() []ownerTokens {
	if it.flushLost {
		return nil
	}
	if it.m != nil {
		ots := messageInterest(it.m.Channel)
		return ots[:]
	}
	return []ownerTokens{{owner: "c:" + firstSegment(it.pres.Channel), tokens: []string{"x:" + it.pres.Channel}}}
}

// probe is what one probe of an owner said: its generation and the tokens anyone watches.
type probe struct {
	gen     uint64
	watched map[string]bool
	err     error
}

// probe asks the interest index about tokens of owner. It runs after every position in the
// batch was taken, so a row filed before that is seen.
func (n *Node) probe(ctx context.Context, owner string, tokens []string) *probe {
	slices.Sort(tokens)
	tokens = slices.Compact(tokens)
	cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	gen, flags, err := n.cfg.Interest.Probe(cctx, owner, tokens)
	return newProbe(gen, tokens, flags, err)
}

func newProbe(gen uint64, tokens []string, flags []bool, err error) *probe {
	p := &probe{gen: gen, err: err, watched: map[string]bool{}}
	for i, t := range tokens {
		if err == nil && flags[i] {
			p.watched[t] = true
		}
	}
	return p
}

// routeItem sends a publication or presence event to the nodes whose interest it hits.
func (n *Node) routeItem(ctx context.Context, it outItem, probes map[string]*probe) {
	kind := KindChannel
	if it.pres != nil {
		kind = KindPresence
	}
	var data []byte
	sent := map[string]bool{}
	for _, ot := range it.interest() {
		nodes, err := n.nodesFor(ctx, n.cache, ot.owner, probes[ot.owner], ot.tokens)
		if err != nil {
			// A lost publication is reported to the nodes holding its channel (once: a
			// report that cannot be routed either is only logged, and the hole shows when
			// the channel's next publication arrives, or the transport reports the outage);
			// a lost presence event leaves a stale roster until the member's next change.
			n.warn.Warn("route", "cluster: route an item", slog.String("owner", ot.owner), slog.Any("err", err))
			if !it.lost {
				n.stats.dropped[kind].Add(1)
				if it.m != nil {
					n.lose(it.m)
				}
			}
			return
		}
		for _, node := range nodes {
			if node == n.cfg.Node || sent[node] {
				continue
			}
			if data == nil {
				switch {
				case it.lost:
					data, err = encodeLost(it.m)
				case it.m != nil:
					data, err = encodeMessage(it.m)
				default:
					data, err = encodePresence(it.pres.Channel, it.pres.Kind, it.pres.Member)
				}
				if err != nil {
					n.log.Error("cluster: encode an item", slog.Any("err", err))
					return
				}
			}
			sent[node] = true
			n.cfg.Transport.Send(node, data)
			n.stats.sent[kind].Add(1)
		}
	}
}

// nodesFor returns the nodes holding a row under any of tokens of owner, by what p (a probe or
// a stamp of the owner) said: only watched tokens are looked at, from the cache when it holds
// them at p's generation, else from the index.
func (n *Node) nodesFor(ctx context.Context, cache map[string]*ownerCache, owner string, p *probe, tokens []string) ([]string, error) {
	if p.err != nil {
		return nil, p.err
	}
	c := cache[owner]
	if c == nil || c.gen != p.gen {
		c = &ownerCache{gen: p.gen, nodes: map[string][]string{}}
		cache[owner] = c
		if len(cache) > maxCachedOwners {
			for o := range cache {
				if o != owner {
					delete(cache, o)
					break
				}
			}
		}
	}
	var missing []string
	for _, t := range tokens {
		if _, ok := c.nodes[t]; !ok && p.watched[t] {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		n.stats.lookups.Add(1)
		cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
		rows, err := n.cfg.Interest.Rows(cctx, owner, missing)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, t := range missing {
			c.nodes[t] = nil
		}
		for _, r := range rows {
			if !contains(c.nodes[r.Token], r.Node) {
				c.nodes[r.Token] = append(c.nodes[r.Token], r.Node)
			}
		}
	}
	var out []string
	for _, t := range tokens {
		for _, node := range c.nodes[t] {
			if !contains(out, node) {
				out = append(out, node)
			}
		}
	}
	return out, nil
}

// maxCachedOwners bounds the rows cache: past it an owner is let go at random. Within an owner
// the cache holds only watched tokens, so it is bounded by the subscriptions.
const maxCachedOwners = 4096

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// receiveLoop hands what other nodes sent to the hub and the router, in the order each sent
// it.
func (n *Node) receiveLoop(ctx context.Context) {
	for {
		batch, ok := n.in.take()
		if !ok {
			return
		}
		for _, in := range batch {
			n.receive(ctx, in)
		}
		n.in.done(batch)
	}
}

func (n *Node) receive(ctx context.Context, in inbound) {
	if in.gap != "" {
		n.log.Warn("cluster: items from another node were lost on the way; its subscribers here are told",
			slog.String("from", in.from), slog.String("reason", string(in.gap)))
		n.stats.gaps[KindTable].Add(1)
		if n.cfg.Tables != nil {
			n.cfg.Tables.Stale(stream.ReasonUpstreamGap)
		}
		// A lost publication is a hole in its channel's offsets: reported when the next one
		// arrives, or, when none does, once Verify has asked the broker how far it went.
		n.cfg.Hub.Verify()
		if n.cfg.Durable != nil {
			n.cfg.Durable.Lost(in.from)
		}
		return
	}
	if len(in.data) == 0 {
		return
	}
	switch in.data[0] {
	case kindMessage, kindLost:
		m, err := decodeMessage(in.data[1:])
		if err != nil {
			n.stats.dropped[KindChannel].Add(1)
			n.log.Error("cluster: a publication, or a lost one's report, from another node does not decode", slog.String("from", in.from), slog.Any("err", err))
			return
		}
		if in.data[0] == kindLost {
			n.cfg.Hub.Lost(m)
			return
		}
		n.stats.received[KindChannel].Add(1)
		if err := n.cfg.Hub.Deliver(m); err != nil {
			n.stats.dropped[KindChannel].Add(1)
			n.warn.Warn("deliver", "cluster: hand on a publication", slog.String("channel", m.Channel), slog.Any("err", err))
			n.cfg.Hub.Lost(m)
		}
	case kindTxn:
		txn, err := decodeTxn(in.data[1:])
		if err == nil && n.cfg.Tables == nil {
			err = errors.New("this node streams no tables")
		}
		if err != nil {
			n.stats.dropped[KindTable].Add(1)
			n.log.Error("cluster: a transaction from another node cannot be routed", slog.String("from", in.from), slog.Any("err", err))
			if n.cfg.Tables != nil {
				n.cfg.Tables.Stale(stream.ReasonUpstreamGap)
			}
			return
		}
		n.stats.received[KindTable].Add(1)
		if err := n.cfg.Tables.Accept(ctx, txn); err != nil && ctx.Err() == nil {
			n.log.Warn("cluster: route a transaction", slog.String("lsn", txn.CommitLSN.String()), slog.Any("err", err))
			n.cfg.Tables.Stale(stream.ReasonUpstreamGap)
		}
	case kindPresence:
		p, err := decodePresence(in.data[1:])
		if err != nil {
			n.stats.dropped[KindPresence].Add(1)
			n.log.Error("cluster: a presence event from another node does not decode", slog.String("from", in.from), slog.Any("err", err))
			return
		}
		n.stats.received[KindPresence].Add(1)
		if n.cfg.Presence != nil {
			n.cfg.Presence.Apply(p.Channel, p.Kind, p.Member)
		}
	case kindDurable:
		key, conn, ents, err := decodeDurable(in.data[1:])
		if err != nil {
			n.stats.dropped[KindDurable].Add(1)
			n.log.Error("cluster: a durable delivery from another node does not decode", slog.String("from", in.from), slog.Any("err", err))
			if n.cfg.Durable != nil {
				n.cfg.Durable.Lost(in.from)
			}
			return
		}
		n.stats.received[KindDurable].Add(1)
		if n.cfg.Durable != nil {
			n.cfg.Durable.Receive(key, conn, ents)
		}
	default:
		n.stats.dropped[KindChannel].Add(1)
		n.log.Error("cluster: a payload of an unknown kind", slog.String("from", in.from), slog.Int("kind", int(in.data[0])))
	}
}

// renewLoop renews this node's rows every RowTTL/4, and files again what the store lost (this
// node stalled past the TTL, or Redis lost it): what was routed meanwhile did not come here,
// so the tables' subscribers are told, and the channels' see the holes in their offsets.
func (n *Node) renewLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.RowTTL / 4)
	defer t.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.renewNow:
		case <-retry:
		}
		retry = nil
		unsure := n.unsure.Load()
		if n.renew(ctx) && unsure {
			n.unsure.Store(false)
		}
		if n.unsure.Load() {
			// Redis did not answer every check: again soon, not a quarter TTL from now.
			retry = time.After(renewRetry)
		}
	}
}

// renewRetry is how soon a renewal that met an error is tried again while the node is unsure
// of its rows.
const renewRetry = 500 * time.Millisecond

// renew checks every owner's rows, files again what the store lost, and reports whether every
// check got an answer.
func (n *Node) renew(ctx context.Context) (ok bool) {
	ok = true
	n.mu.Lock()
	owners := make(map[string][]interest.Row, len(n.held))
	for o, h := range n.held {
		rows := make([]interest.Row, 0, len(h.rows))
		for _, r := range h.rows {
			rows = append(rows, r)
		}
		owners[o] = rows
	}
	n.mu.Unlock()
	var tables, channels bool
	defer func() {
		// What was routed while the rows were missing did not come here. Told once, after
		// every owner's rows are back, so what is routed after it reaches this node.
		if tables && n.cfg.Tables != nil {
			n.cfg.Tables.Stale(stream.ReasonUpstreamGap)
		}
		if channels {
			n.cfg.Hub.Verify()
		}
	}()
	for o, rows := range owners {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
		have, err := n.cfg.Interest.Refresh(cctx, o, n.cfg.Node)
		n.log.Debug("cluster: renew", slog.String("owner", o), slog.Int("have", have), slog.Int("want", len(rows)), slog.Any("err", err))
		if err == nil && have < len(rows) {
			// Fewer rows than the snapshot: the store lost some, or a subscription was released
			// since the snapshot. Filing a row again tells them apart: the store had lost it
			// only if the Add takes it and the row is still held after the Add (a release
			// stops holding it before it removes it).
			lost := 0
			for _, r := range rows {
				_, aerr := n.cfg.Interest.Add(cctx, o, r)
				switch {
				case aerr == nil && n.holds(o, r.Sub):
					lost++
				case aerr == nil:
					// Released meanwhile, and its release's Remove may have come before this
					// Add: take the row away again, or it would stay as long as this node lives.
					if _, rerr := n.cfg.Interest.Remove(cctx, o, n.cfg.Node, r.Sub); rerr != nil && !isNotFound(rerr) {
						err = rerr
					}
				case !isDuplicate(aerr):
					err = aerr
				}
			}
			if lost > 0 {
				n.log.Warn("cluster: this node's subscriptions had expired in Redis; filed them again", slog.String("owner", o),
					slog.Int("lost", lost), slog.Int("held", len(rows)))
				tables = tables || o[0] == 't'
				channels = channels || o[0] == 'c'
			}
		}
		cancel()
		if err != nil {
			ok = false
			if ctx.Err() == nil {
				n.warn.Warn("renew", "cluster: renew this node's subscriptions", slog.String("owner", o), slog.Any("err", err))
			}
		}
	}
	return ok
}

// holds reports whether this node still holds subscription sub under owner.
func (n *Node) holds(owner, sub string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.held[owner]
	if o == nil {
		return false
	}
	_, ok := o.rows[sub]
	return ok
}

func isDuplicate(err error) bool { return isFault(err, fault.CodeDuplicateSubscription) }

func isNotFound(err error) bool { return isFault(err, fault.CodeNotFound) }

func isFault(err error, code fault.Code) bool {
	var fe *fault.Error
	return errors.As(err, &fe) && fe.Code == code
}

// Stats is a snapshot of a node's counters.
type Stats struct {
	Sent, Received, Dropped, Gaps [kinds]uint64
	Lookups                       uint64 // rows read from the interest store
	Routing, Receiving            int    // items waiting in each queue
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	var s Stats
	for k := range kinds {
		s.Sent[k], s.Received[k], s.Dropped[k], s.Gaps[k] = n.stats.sent[k].Load(), n.stats.received[k].Load(), n.stats.dropped[k].Load(), n.stats.gaps[k].Load()
	}
	s.Lookups = n.stats.lookups.Load()
	s.Routing, s.Receiving = n.out.len(), n.in.len()
	return s
}
