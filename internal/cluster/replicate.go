package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/heraldrt/herald/internal/change"
)

// Replicate is the changefeed's sink on the replicator: it sends each transaction's changes to
// the other nodes whose interest they hit, routes it to this node's own subscriptions, and
// returns once the transport holds what it sent (Flush), so the changefeed confirms only what
// every interested node was handed.
//
// Per table the transaction touches, it first stamps the table's owner with the
// transaction's commit LSN and, in the same step, reads the owner's generation; only then does
// it read (or take from its cache) the rows of the changes' tokens. A subscription on any node
// files its row, then reads the mark: every transaction past the mark was stamped after the
// row was filed, so its routing saw the row; the subscription starts after the mark.
func (n *Node) Replicate(ctx context.Context, txn *change.Txn) error {
	if n.cfg.Tables == nil {
		return fmt.Errorf("cluster: replicate without tables")
	}
	perNode := map[string][]int{}
	if err := n.routeTxn(ctx, txn, perNode); err != nil {
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

// routeTxn fills perNode with the indexes of the events each other node must get. A
// transaction too large to hold (Overflow) goes, with no events, to every node holding any of
// its tables.
func (n *Node) routeTxn(ctx context.Context, txn *change.Txn, perNode map[string][]int) error {
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
			// Without the table's types the change's tokens are unknown: it goes to every
			// node that holds the table.
			n.log.Warn("cluster: the types of a table are unknown; routing its change to every node that holds it", slog.String("table", table), slog.Any("err", err))
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
	for k, i := range idx {
		nodes, err := n.nodesFor(ctx, n.tcache, owner, p, tokens[k])
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
