package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
)

// Replicate is the changefeed's sink on the replicator: it sends each transaction's changes to
// the other nodes whose interest they hit, routes it to this node's own subscriptions, and
// returns once the transport holds what it sent (Flush), so the changefeed confirms only what
// every interested node was handed.
//
// First, with Config.History, it appends the transaction to the history of each table it
// touched, all of them in one round trip, before any is stamped: every transaction of a table
// at or before the mark a subscriber reads is in the table's history, so a resume is replayed
// from there up to the mark, and live past it. An append that fails fails Replicate: the
// changefeed does not confirm the transaction, and streams it again.
//
// Then, per table the transaction touches, it stamps the table's owner with the transaction's
// commit LSN and, in the same step, reads the owner's generation; only then does it read (or
// take from its cache) the rows of the changes' tokens. A subscription on any node files its
// row, then reads the mark: every transaction past the mark was stamped after the row was
// filed, so its routing saw the row; the subscription starts after the mark.
func (n *Node) Replicate(ctx context.Context, txn *change.Txn) error {
	if n.cfg.Tables == nil {
		return fmt.Errorf("cluster: replicate without tables")
	}
	byTable := tablesOf(txn)
	if err := n.record(ctx, txn, byTable); err != nil {
		return err
	}
	perNode := map[string][]int{}
	if err := n.routeTxn(ctx, txn, byTable, perNode); err != nil {
		return err
	}
	for node, idx := range perNode {
		data, err := encodeTxn(txn, idx)
		if err != nil {
			return fmt.Errorf("cluster: encode transaction %s: %w", txn.CommitLSN, err)
		}
		n.cfg.Transport.Send(node, data)
		n.stats.sent[KindTable].Add(1)
	}
	if node := n.fenceNode(txn); node != "" {
		// The fence's position is all it carries: its events go as empty messages.
		data, err := encodeTxn(txn, nil)
		if err != nil {
			return fmt.Errorf("cluster: encode the fence at %s: %w", txn.CommitLSN, err)
		}
		n.cfg.Transport.Send(node, data)
		n.stats.sent[KindTable].Add(1)
		perNode[node] = nil
	}
	if err := n.cfg.Tables.Accept(ctx, txn); err != nil {
		return err
	}
	if len(perNode) == 0 {
		return nil
	}
	if err := n.cfg.Transport.Flush(ctx); err != nil {
		return fmt.Errorf("cluster: hand transaction %s to the other nodes: %w", txn.CommitLSN, err)
	}
	return nil
}

// fenceNode returns the other node a fence names, when txn is one: a logical message sent
// outside any transaction with the fence prefix (Config.FencePrefix), whose content starts
// with the emitting node's id; "" otherwise.
func (n *Node) fenceNode(txn *change.Txn) string {
	if n.cfg.FencePrefix == "" || txn.Transactional || len(txn.Events) != 1 {
		return ""
	}
	e := &txn.Events[0]
	if e.Op != change.Message || e.Prefix != n.cfg.FencePrefix {
		return ""
	}
	node, _, ok := strings.Cut(e.Content, ".")
	if !ok || node == "" || node == n.cfg.Node {
		return ""
	}
	return node
}

// tablesOf returns the indexes of txn's events by table, and, for a transaction too large to
// hold (Overflow), each table it names, with no events.
func tablesOf(txn *change.Txn) map[string][]int {
	byTable := map[string][]int{}
	for i := range txn.Events {
		if e := &txn.Events[i]; e.Op != change.Message && e.Table != "" {
			byTable[e.Table] = append(byTable[e.Table], i)
		}
	}
	if txn.Overflow != nil {
		for t := range txn.Overflow.Tables {
			if _, ok := byTable[t]; !ok {
				byTable[t] = nil
			}
		}
	}
	return byTable
}

// routeTxn fills perNode with the indexes of the events each other node must get. A
// transaction too large to hold (Overflow) goes, with no events, to every node holding any of
// its tables.
func (n *Node) routeTxn(ctx context.Context, txn *change.Txn, byTable map[string][]int, perNode map[string][]int) error {
	for table, idx := range byTable {
		owner := TableOwner(table)
		cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
		err := n.routeTable(cctx, txn, table, owner, idx, perNode)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// routeTable adds the events idx of one table (none: an overflow) to the nodes that need them.
func (n *Node) routeTable(ctx context.Context, txn *change.Txn, table, owner string, idx []int, perNode map[string][]int) error {
	// Each event's tokens, then one stamp for all of them: the owner's mark moves to this
	// transaction before its rows are read.
	tokens := make([][]string, len(idx))
	var all []string
	known := true
	for k, i := range idx {
		var err error
		if tokens[k], err = n.cfg.Tables.Tokens(ctx, &txn.Events[i], nil); err != nil {
			// Without the table's types, or with a column the catalog read lacks, the
			// change's tokens are unknown: it goes to every node that holds the table.
			n.warn.Warn("tokens", "cluster: a change's interest tokens are unknown; routing it to every node that holds its table", slog.String("table", table), slog.Any("err", err))
			known = false
		}
		all = append(all, tokens[k]...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	gen, flags, err := n.cfg.Interest.Stamp(ctx, owner, uint64(txn.CommitLSN), all)
	if err != nil {
		return fmt.Errorf("cluster: stamp %s at %s: %w", table, txn.CommitLSN, err)
	}
	if len(idx) == 0 || !known {
		// An overflow, or tokens unknown: every node holding the table, with every event.
		nodes, err := n.cfg.Interest.Sockets(ctx, owner)
		if err != nil {
			return fmt.Errorf("cluster: route %s at %s: %w", table, txn.CommitLSN, err)
		}
		for _, node := range nodes {
			if node != n.cfg.Node {
				perNode[node] = append(perNode[node], idx...)
				if perNode[node] == nil {
					perNode[node] = []int{}
				}
			}
		}
		return nil
	}
	p := newProbe(gen, all, flags, nil)
	var holders []string // every node holding the table, read for the first truncate
	held := false
	for k, i := range idx {
		var nodes []string
		var err error
		if txn.Events[i].Op == change.Truncate {
			// A truncate empties the table under every subscription, whatever value its
			// filter pins, so every node holding the table gets it, not only those holding
			// its one token (AnyToken).
			if !held {
				holders, err = n.cfg.Interest.Sockets(ctx, owner)
				held = err == nil
			}
			nodes = holders
		} else {
			nodes, err = n.nodesFor(ctx, n.tcache, owner, p, tokens[k])
		}
		if err != nil {
			return fmt.Errorf("cluster: route %s at %s: %w", table, txn.CommitLSN, err)
		}
		for _, node := range nodes {
			if node != n.cfg.Node {
				perNode[node] = append(perNode[node], i)
			}
		}
	}
	return nil
}

// record appends txn to the history of each table it touched (byTable), in one round trip.
// Each entry's Prev is what this node knows of the table's transaction before it (see
// recorded); the store raises it to the table's last entry.
func (n *Node) record(ctx context.Context, txn *change.Txn, byTable map[string][]int) error {
	if n.cfg.History == nil || len(byTable) == 0 {
		return nil
	}
	entries := make([]history.Entry, 0, len(byTable))
	for table, idx := range byTable {
		data, err := history.Encode(txn, idx)
		if err != nil {
			return fmt.Errorf("cluster: encode transaction %s of %s for its history: %w", txn.CommitLSN, table, err)
		}
		entries = append(entries, history.Entry{Table: table, LSN: txn.CommitLSN, Data: data})
	}
	n.recorded.mu.Lock()
	for i := range entries {
		entries[i].Prev = n.recorded.prev(entries[i].Table, txn.CommitLSN)
	}
	n.recorded.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	err := n.cfg.History.Append(cctx, entries)
	cancel()
	if err != nil {
		return fmt.Errorf("cluster: record transaction %s in its tables' history: %w", txn.CommitLSN, err)
	}
	n.recorded.mu.Lock()
	n.recorded.note(entries)
	n.recorded.mu.Unlock()
	return nil
}

// recorded is what the replicator knows of the tables' histories, for the Prev of what it
// appends: an entry's Prev must be at or after the table's transaction before it, and a
// table's history may have gone (an idle table's expires) while this node remembers its last
// transaction, or since before this node streamed. Guarded by mu: Replicate and Streaming run
// on the changefeed's goroutines, in turn.
type recorded struct {
	mu sync.Mutex
	// known says Streaming was told where the stream started, so from means something.
	known bool
	// from: every transaction committed after it reaches Replicate here, in commit order
	// (a stream resumes at or before the last transaction recorded, or this is reset).
	from change.LSN
	// to is the commit LSN of the last transaction recorded.
	to change.LSN
	// last is each table's last transaction recorded in (from, to]: at most maxRecordedTables.
	last map[string]change.LSN
}

// maxRecordedTables bounds what recorded remembers: past it, it forgets every table, and from
// moves up to the last transaction recorded, which stays true.
const maxRecordedTables = 1 << 16

// prev returns what an entry of table at lsn may give as its Prev: the table's last transaction
// this node recorded; failing that, the position after which it saw every transaction; failing
// that, lsn-1, true of any transaction.
func (r *recorded) prev(table string, lsn change.LSN) change.LSN {
	if l, ok := r.last[table]; ok {
		return l
	}
	if r.known {
		return r.from
	}
	return lsn - 1
}

// note remembers what was appended (or was there already).
func (r *recorded) note(entries []history.Entry) {
	if r.last == nil {
		r.last = map[string]change.LSN{}
	}
	for _, e := range entries {
		r.last[e.Table] = max(r.last[e.Table], e.LSN)
		r.to = max(r.to, e.LSN)
	}
	if len(r.last) > maxRecordedTables {
		clear(r.last)
		r.from = r.to
	}
}

// Streaming tells the replicator its change stream went live at start (changefeed.OnStream):
// every transaction committed at or after start reaches Replicate, in commit order. What it
// knew of the tables' histories holds on only when it saw every transaction before start (the
// stream resumes at or before the last one it recorded); otherwise another replicator may have
// recorded some meanwhile, and it forgets.
func (n *Node) Streaming(start change.LSN) {
	from := start
	if from > 0 {
		from--
	}
	r := &n.recorded
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.known || from > r.to {
		r.known, r.from, r.to = true, from, from
		clear(r.last)
	}
}
