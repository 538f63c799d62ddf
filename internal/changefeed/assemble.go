package changefeed

import (
	"fmt"
	"slices"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/jackc/pglogrepl"
)

// assembler turns the message sequence of one replication connection into committed
// transactions. Only committed work leaves it: a transaction is buffered until its Commit (or
// Stream Commit), a streamed transaction that aborts is discarded, and a streamed subtransaction
// that aborts takes only its own changes with it. It is owned by the stream's reader goroutine.
type assembler struct {
	dec            *decoder
	writeTagPrefix string
	messages       func(prefix string) bool
	maxTxnBytes    int
	// text turns a logical message's content, which arrives in the database's encoding, into
	// text (see messageText).
	text func([]byte) string
	// skipThrough is the commit LSN of the last transaction already handed on: one at or before
	// it is a replay (Postgres resends from its confirmed position, which can lag) and is dropped.
	skipThrough change.LSN
	// xidRef is the XID8 the next transaction's 32-bit xid is widened against (see widen):
	// seeded from the server's snapshot when the stream starts, then the last one widened.
	// Zero until known: the first xid is then taken to be in epoch 0.
	xidRef change.XID8

	// eventsHint is the event count of the last committed transaction. One that outgrows a few
	// events grows straight to it, since bulk work comes in runs of like-sized transactions:
	// each doubling of a slice of events copies every pointer in it under the write barrier and
	// leaves the old array to the collector.
	eventsHint int
	// spare is the arena of the last committed transaction; the next one fills its free room
	// rather than starting a chunk of its own.
	spare arena

	cur      *pending            // the open (non-streamed) transaction, between Begin and Commit
	inStream bool                // between Stream Start and Stream Stop
	streams  map[uint32]*pending // streamed transactions in progress, by top-level xid
	streamID uint32              // the top-level xid of the open stream segment
}

// pending is a transaction being assembled.
type pending struct {
	xid        uint32
	commitLSN  change.LSN
	commitTime time.Time
	events     []change.Event
	subxids    []uint32 // parallel to events, for streamed transactions: who made each change
	bytes      int
	tags       int            // write tags added to events, for finish to take out; an abort may leave it high
	lost       map[string]int // past maxTxnBytes: changes let go, by table
	lostN      int
	arena      arena // backs the rows of events
}

func newAssembler(dec *decoder, cfg *Config) *assembler {
	prefixes := map[string]bool{}
	all := false
	for _, p := range cfg.MessagePrefixes {
		if p == "*" {
			all = true
		}
		prefixes[p] = true
	}
	return &assembler{
		dec:            dec,
		writeTagPrefix: cfg.WriteTagPrefix,
		messages:       func(p string) bool { return all || prefixes[p] },
		maxTxnBytes:    cfg.MaxTxnBytes,
		text:           messageText("UTF8"),
		skipThrough:    cfg.From,
		streams:        map[uint32]*pending{},
	}
}

// open reports whether any transaction is partly received: then the server's WAL end is not a
// position that may be confirmed.
func (a *assembler) open() bool { return a.cur != nil || a.inStream || len(a.streams) > 0 }

// inTxn reports whether the stream is in the middle of a transaction or of a streamed segment:
// more of it is on its way, and none of it can be handed on before its end arrives.
func (a *assembler) inTxn() bool { return a.cur != nil || a.inStream }

// result is what one message completed, if anything.
type result struct {
	txn *change.Txn // a committed transaction to hand on
	// skipped is the end LSN of a committed transaction that was dropped as a replay; it was
	// handed on before, so its end may be confirmed once everything before it is.
	skipped change.LSN
}

// handle processes one pgoutput message that arrived at walStart.
func (a *assembler) handle(walStart change.LSN, data []byte) (result, error) {
	if len(data) > 0 && (data[0] == 'I' || data[0] == 'U' || data[0] == 'D') {
		if err := checkTuples(data, a.inStream); err != nil {
			return result{}, err
		}
		return result{}, a.rowChange(data)
	}
	msg, err := parseMessage(data, a.inStream)
	if err != nil {
		return result{}, err
	}
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if a.cur != nil {
			return result{}, fmt.Errorf("begin of xid %d inside open xid %d", m.Xid, a.cur.xid)
		}
		a.cur = a.newPending(m.Xid)
		a.cur.commitLSN, a.cur.commitTime = change.LSN(m.FinalLSN), m.CommitTime
	case *pglogrepl.CommitMessage:
		if a.cur == nil {
			return result{}, fmt.Errorf("commit at %s with no open transaction", change.LSN(m.CommitLSN))
		}
		p := a.cur
		a.cur = nil
		p.commitLSN, p.commitTime = change.LSN(m.CommitLSN), m.CommitTime
		return a.finish(p, change.LSN(m.TransactionEndLSN))
	case *pglogrepl.StreamStartMessageV2:
		if a.inStream {
			return result{}, fmt.Errorf("stream start of xid %d inside open stream of xid %d", m.Xid, a.streamID)
		}
		a.inStream, a.streamID = true, m.Xid
		if a.streams[m.Xid] == nil {
			a.streams[m.Xid] = a.newPending(m.Xid)
		}
	case *pglogrepl.StreamStopMessageV2:
		a.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		p := a.streams[m.Xid]
		delete(a.streams, m.Xid)
		if p == nil {
			// Every segment of it held only changes to tables nobody follows.
			p = &pending{xid: m.Xid}
		}
		p.commitLSN, p.commitTime = change.LSN(m.CommitLSN), m.CommitTime
		return a.finish(p, change.LSN(m.TransactionEndLSN))
	case *pglogrepl.StreamAbortMessageV2:
		a.abort(m.Xid, m.SubXid)
	case *pglogrepl.RelationMessageV2:
		a.dec.relation(&m.RelationMessage)
	case *pglogrepl.TypeMessageV2:
		a.dec.typ(&m.TypeMessage)
	case *pglogrepl.TruncateMessageV2:
		// One rowless change per truncated relation that is followed: never dropped, since every
		// subscriber of the table holds rows that are gone.
		for _, id := range m.RelationIDs {
			if err := a.change(m.Xid, id, func(*relation, *arena) (change.Event, error) {
				return change.Event{Op: change.Truncate}, nil
			}); err != nil {
				return result{}, err
			}
		}
	case *pglogrepl.LogicalDecodingMessageV2:
		return a.message(walStart, m)
	case *pglogrepl.OriginMessage:
		// Changes replicated in from elsewhere are changes all the same.
	default:
		// Unknown kinds are not ours to act on. PG18 can send a stray Stream Abort to a consumer
		// that never asked for streaming; ParseV2 decodes it and abort ignores an unknown xid.
	}
	return result{}, nil
}

// newPending starts a transaction in the spare arena.
func (a *assembler) newPending(xid uint32) *pending {
	p := &pending{xid: xid, arena: a.spare}
	a.spare = arena{}
	return p
}

// target is the transaction a change belongs to: the open stream's for a streamed change, else
// the one between Begin and Commit.
func (a *assembler) target() (*pending, error) {
	if a.inStream {
		p := a.streams[a.streamID]
		if p == nil {
			return nil, fmt.Errorf("a change arrived in the stream of xid %d after it was aborted", a.streamID)
		}
		return p, nil
	}
	if a.cur == nil {
		return nil, fmt.Errorf("a change arrived outside any transaction")
	}
	return a.cur, nil
}

func (a *assembler) change(xid uint32, relID uint32, build func(*relation, *arena) (change.Event, error)) error {
	r, err := a.dec.lookup(relID)
	if err != nil {
		return err
	}
	if !r.follow {
		return nil
	}
	p, err := a.target()
	if err != nil {
		return err
	}
	if p.lost != nil {
		p.lost[r.table]++
		p.lostN++
		return nil
	}
	ev, err := build(r, &p.arena)
	if err != nil {
		return err
	}
	ev.Table = r.table
	a.add(p, xid, ev)
	return nil
}

// eventsHintMin is how many events a transaction holds before it grows to eventsHint, so a
// small transaction after a large one stays small; eventsHintMax (2 MB of events) bounds the
// one allocation a hint can make.
const (
	eventsHintMin = 8
	eventsHintMax = 8192
)

func (a *assembler) add(p *pending, xid uint32, ev change.Event) {
	if n := len(p.events); n == cap(p.events) && n >= eventsHintMin && a.eventsHint > n {
		p.events = slices.Grow(p.events, a.eventsHint-n)
	}
	p.events = append(p.events, ev)
	if ev.Op == change.Message && ev.Prefix == a.writeTagPrefix {
		p.tags++
	}
	if a.inStream {
		p.subxids = append(p.subxids, xid)
	}
	p.bytes += eventBytes(&ev)
	if p.bytes <= a.maxTxnBytes {
		return
	}
	// Past the bound, the rows are let go and only their count per table is kept: consumers are
	// told exactly which tables went stale rather than the process dying of a bulk UPDATE.
	p.lost = map[string]int{}
	for i := range p.events {
		if p.events[i].Op != change.Message {
			p.lost[p.events[i].Table]++
			p.lostN++
		}
	}
	kept := p.events[:0]
	for _, e := range p.events {
		if e.Op == change.Message && e.Prefix == a.writeTagPrefix {
			kept = append(kept, e)
		}
	}
	p.events, p.subxids, p.bytes = kept, nil, 0
	p.arena = arena{} // the rows are let go, and their chunks with them
}

func (a *assembler) message(walStart change.LSN, m *pglogrepl.LogicalDecodingMessageV2) (result, error) {
	tag := m.Prefix == a.writeTagPrefix
	if !tag && !a.messages(m.Prefix) {
		return result{}, nil
	}
	ev := change.Event{Op: change.Message, Prefix: m.Prefix, Content: a.text(m.Content)}
	if !m.Transactional {
		// Sent at once, outside any transaction, whether or not its transaction later commits:
		// it is positioned by its own LSN.
		if tag {
			return result{}, nil
		}
		lsn := change.LSN(m.LSN)
		if lsn <= a.skipThrough {
			return result{skipped: lsn}, nil
		}
		ev.LSN = lsn
		// It has no commit time, and none is made up for it.
		return result{txn: &change.Txn{CommitLSN: lsn, EndLSN: lsn, Events: []change.Event{ev}}}, nil
	}
	p, err := a.target()
	if err != nil {
		return result{}, err
	}
	a.add(p, m.Xid, ev)
	return result{}, nil
}

// abort discards a streamed transaction, or one subtransaction's changes within it.
func (a *assembler) abort(xid, subxid uint32) {
	p := a.streams[xid]
	if p == nil {
		return
	}
	if subxid == xid {
		delete(a.streams, xid)
		return
	}
	if p.lost != nil {
		// The rows are already gone; the loss report stays an over-estimate, which is safe.
		return
	}
	kept, keptX := p.events[:0], p.subxids[:0]
	p.bytes = 0
	for i, e := range p.events {
		if p.subxids[i] == subxid {
			continue
		}
		kept, keptX = append(kept, e), append(keptX, p.subxids[i])
		p.bytes += eventBytes(&e)
	}
	p.events, p.subxids = kept, keptX
}

// widen returns the XID8 of a committed transaction's 32-bit xid: the one nearest the
// reference (change.WidenXID), which then moves to it. Transactions commit in nearly xid order
// and every xid in use lies within 2^31 of the next to be assigned, so the nearest is the
// right one whatever epoch the stream crosses. Replays are widened too, so the reference
// follows the stream.
func (a *assembler) widen(xid uint32) (change.XID8, error) {
	if a.xidRef == 0 {
		a.xidRef = change.MakeXID8(0, xid)
		return a.xidRef, nil
	}
	x, ok := change.WidenXID(xid, a.xidRef)
	if !ok {
		return 0, fmt.Errorf("xid %d cannot be a transaction near %s (the last one widened): it would lie outside every epoch", xid, a.xidRef)
	}
	a.xidRef = x
	return x, nil
}

// finish stamps a committed transaction's events with its position, or drops it as a replay.
func (a *assembler) finish(p *pending, end change.LSN) (result, error) {
	xid8, err := a.widen(p.xid)
	if err != nil {
		return result{}, err
	}
	if p.commitLSN <= a.skipThrough {
		return result{skipped: end}, nil
	}
	a.skipThrough = p.commitLSN
	if len(p.events) > 0 {
		// One with nothing followed says nothing of the next one's size.
		a.eventsHint = min(len(p.events), eventsHintMax)
	}
	if p.lost == nil {
		a.spare = p.arena
	}
	txn := &change.Txn{XID: p.xid, XID8: xid8, CommitLSN: p.commitLSN, EndLSN: end, CommitTime: p.commitTime.UTC(), Transactional: true}
	events := p.events
	if p.tags > 0 {
		events = events[:0]
		for i := range p.events {
			e := &p.events[i]
			if e.Op == change.Message && e.Prefix == a.writeTagPrefix {
				txn.WriteTag = e.Content // the last tag wins
				continue
			}
			events = append(events, *e)
		}
	}
	if p.lost != nil {
		txn.Overflow = &change.Overflow{Tables: p.lost, Changes: p.lostN}
		events = nil
	}
	if cap(events) > 4*len(events) && cap(events) > 4*eventsHintMin {
		// A hint far too large for this one: the sink may hold the events a while.
		events = slices.Clone(events)
	}
	for i := range events {
		e := &events[i]
		e.LSN, e.TxID, e.CommitTime, e.WriteTag = txn.CommitLSN, txn.XID, txn.CommitTime, txn.WriteTag
	}
	txn.Events = events
	return result{txn: txn}, nil
}

// eventBytes estimates an event's memory: its row bytes plus a fixed overhead.
func eventBytes(e *change.Event) int {
	n := 160 + len(e.Content)
	for _, r := range []change.Row{e.Before, e.After} {
		for _, c := range r {
			n += len(c.Name) + len(c.Value) + 40
		}
	}
	return n
}
