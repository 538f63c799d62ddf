package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/stream"
)

// What crosses between nodes: one payload per item and destination node, its first byte its
// kind, the rest JSON. Nodes of one deployment run one version; a payload of a kind a node
// does not know is counted and dropped, as a lost one would be.
const (
	kindMessage  byte = 'm' // a channel publication
	kindLost     byte = 'l' // a channel publication's position that the sending node could not route
	kindTxn      byte = 't' // a transaction's changes to tables the destination watches
	kindPresence byte = 'p' // a presence join or leave
	kindDurable  byte = 'd' // a durable subscription's delivery to one connection on the destination
)

// wireDurable is a durable subscription's delivery to one connection: the subscription's key,
// the connection, and its entries (publications and markers) in order.
type wireDurable struct {
	Subject string       `json:"s"`
	App     string       `json:"a,omitempty"`
	Name    string       `json:"n"`
	Conn    string       `json:"c"`
	Entries []wireDEntry `json:"e"`
}

type wireDEntry struct {
	Msg     *wireMessage `json:"m,omitempty"`
	Gap     *wireGap     `json:"g,omitempty"`
	Attempt int          `json:"t,omitempty"`
}

type wireGap struct {
	First  stream.Position `json:"f"`
	Last   stream.Position `json:"l"`
	Lost   uint64          `json:"n,omitempty"`
	Reason stream.Reason   `json:"r"`
}

func encodeDurable(key durable.Key, conn string, ents []durable.Entry) ([]byte, error) {
	w := wireDurable{Subject: key.Subject, App: key.App, Name: key.Name, Conn: conn, Entries: make([]wireDEntry, 0, len(ents))}
	for _, e := range ents {
		we := wireDEntry{Attempt: e.Attempt}
		switch {
		case e.Msg != nil:
			m := e.Msg
			we.Msg = &wireMessage{Pos: m.Pos, Channel: m.Channel, Event: m.Event, Data: m.Data}
		case e.Gap != nil:
			g := e.Gap
			we.Gap = &wireGap{First: g.First, Last: g.Last, Lost: g.Lost, Reason: g.Reason}
		default:
			continue
		}
		w.Entries = append(w.Entries, we)
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	return append([]byte{kindDurable}, b...), nil
}

func decodeDurable(b []byte) (durable.Key, string, []durable.Entry, error) {
	var w wireDurable
	if err := json.Unmarshal(b, &w); err != nil {
		return durable.Key{}, "", nil, err
	}
	if w.Subject == "" || w.Name == "" || w.Conn == "" {
		return durable.Key{}, "", nil, errors.New("a durable delivery without a subject, a name or a connection")
	}
	ents := make([]durable.Entry, 0, len(w.Entries))
	for _, we := range w.Entries {
		switch {
		case we.Msg != nil:
			m := we.Msg
			if !m.Pos.IsChannel() || m.Channel == "" {
				return durable.Key{}, "", nil, errors.New("a durable publication without a channel position or a channel")
			}
			ents = append(ents, durable.Entry{Msg: &stream.Message{Pos: m.Pos, Channel: m.Channel, Event: m.Event, Data: m.Data}, Attempt: we.Attempt})
		case we.Gap != nil:
			g := we.Gap
			if g.Last.IsZero() || g.Reason == "" {
				return durable.Key{}, "", nil, errors.New("a durable marker without a last position or a reason")
			}
			ents = append(ents, durable.Entry{Gap: &stream.Gap{First: g.First, Last: g.Last, Lost: g.Lost, Reason: g.Reason}})
		}
	}
	return durable.Key{Subject: w.Subject, App: w.App, Name: w.Name}, w.Conn, ents, nil
}

type wirePresence struct {
	Channel string              `json:"ch"`
	Kind    stream.PresenceKind `json:"k"`
	Member  stream.Member       `json:"m"`
}

func encodePresence(channel string, kind stream.PresenceKind, m stream.Member) ([]byte, error) {
	b, err := json.Marshal(wirePresence{Channel: channel, Kind: kind, Member: m})
	if err != nil {
		return nil, err
	}
	return append([]byte{kindPresence}, b...), nil
}

func decodePresence(b []byte) (*wirePresence, error) {
	var w wirePresence
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	if w.Channel == "" || w.Member.ID == "" || (w.Kind != stream.PresenceJoin && w.Kind != stream.PresenceLeave) {
		return nil, errors.New("a presence event without a channel, a member or a kind")
	}
	if string(w.Member.Meta) == "null" {
		// A member without meta has nil Meta (presence.CompactMeta), which JSON carries as
		// null: handed on as the four bytes, a join would show "meta":null to the subscribers
		// of other nodes and no meta to this node's.
		w.Member.Meta = nil
	}
	return &w, nil
}

type wireMessage struct {
	Pos     stream.Position `json:"pos"`
	Channel string          `json:"ch"`
	Event   string          `json:"ev,omitempty"`
	Data    json.RawMessage `json:"d"`
}

func encodeMessage(m *stream.Message) ([]byte, error) {
	b, err := json.Marshal(wireMessage{Pos: m.Pos, Channel: m.Channel, Event: m.Event, Data: m.Data})
	if err != nil {
		return nil, err
	}
	return append([]byte{kindMessage}, b...), nil
}

// encodeLost is the report that the publication at m's position was not routed: its channel
// and position, wireMessage's fields without the data, decoded by decodeMessage.
func encodeLost(m *stream.Message) ([]byte, error) {
	b, err := json.Marshal(struct {
		Pos     stream.Position `json:"pos"`
		Channel string          `json:"ch"`
	}{m.Pos, m.Channel})
	if err != nil {
		return nil, err
	}
	return append([]byte{kindLost}, b...), nil
}

func decodeMessage(b []byte) (*stream.Message, error) {
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	if !w.Pos.IsChannel() || w.Channel == "" {
		return nil, errors.New("a publication without a channel position or a channel")
	}
	return &stream.Message{Pos: w.Pos, Channel: w.Channel, Event: w.Event, Data: w.Data}, nil
}

// wireTxn is a transaction as one destination needs it: only the events of tables it
// watches, each with its index in the whole transaction (its position), and the overflow.
type wireTxn struct {
	XID           uint32           `json:"xid"`
	XID8          change.XID8      `json:"xid8,omitempty"` // absent from a node that predates it
	CommitLSN     change.LSN       `json:"lsn"`
	EndLSN        change.LSN       `json:"end"`
	CommitTime    time.Time        `json:"time,omitzero"`
	WriteTag      string           `json:"tag,omitempty"`
	Transactional bool             `json:"tx,omitempty"`
	Len           int              `json:"n"` // events in the whole transaction
	Events        []wireEvent      `json:"ev"`
	Overflow      *change.Overflow `json:"of,omitempty"`
}

type wireEvent struct {
	Idx uint32 `json:"i"` // 1-based, in the whole transaction
	change.Event
	Key []string `json:"k,omitempty"`
}

// encodeTxn encodes the events of txn whose indexes (0-based) are in idx.
func encodeTxn(txn *change.Txn, idx []int) ([]byte, error) {
	w := wireTxn{XID: txn.XID, XID8: txn.XID8, CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN, CommitTime: txn.CommitTime, WriteTag: txn.WriteTag,
		Transactional: txn.Transactional, Len: len(txn.Events), Overflow: txn.Overflow, Events: make([]wireEvent, 0, len(idx))}
	for _, i := range idx {
		e := &txn.Events[i]
		w.Events = append(w.Events, wireEvent{Idx: uint32(i + 1), Event: *e, Key: e.Key})
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, err
	}
	return append([]byte{kindTxn}, b...), nil
}

// maxTxnEvents bounds the events a decoded transaction may claim, so a corrupt payload cannot
// make a node allocate without bound (a placeholder is a few hundred bytes). A transaction
// with more changes than this is past any max_txn_bytes that fits in memory (at the 256 MiB
// default, 4M changes would be 64 bytes each): the changefeed sends it as an overflow.
const maxTxnEvents = 1 << 22

// decodeTxn rebuilds the transaction with its events at their indexes; the events the sender
// left out (other tables) are empty messages, which the router skips.
func decodeTxn(b []byte) (*change.Txn, error) { return decodeTxnAtMost(b, maxTxnEvents) }

// decodeTxnAtMost is decodeTxn refusing a transaction of more than maxEvents events: the
// fuzz target's bound is smaller, so that each of its inputs stays cheap.
func decodeTxnAtMost(b []byte, maxEvents int) (*change.Txn, error) {
	var w wireTxn
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	if w.Len < 0 || w.Len > maxEvents || len(w.Events) > w.Len {
		return nil, fmt.Errorf("a transaction of %d events carrying %d", w.Len, len(w.Events))
	}
	txn := &change.Txn{XID: w.XID, XID8: w.XID8, CommitLSN: w.CommitLSN, EndLSN: w.EndLSN, CommitTime: w.CommitTime, WriteTag: w.WriteTag,
		Transactional: w.Transactional, Overflow: w.Overflow, Events: make([]change.Event, w.Len)}
	for i := range txn.Events {
		txn.Events[i].Op = change.Message
	}
	for _, e := range w.Events {
		if e.Idx == 0 || int(e.Idx) > w.Len {
			return nil, fmt.Errorf("event index %d outside a transaction of %d", e.Idx, w.Len)
		}
		ev := e.Event
		ev.Key = e.Key
		txn.Events[e.Idx-1] = ev
	}
	return txn, nil
}
