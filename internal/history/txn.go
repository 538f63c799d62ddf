package history

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/heraldrt/herald/internal/change"
)

// Txn is what an entry's payload holds: one transaction's changes to the entry's table, each
// with its index in the whole transaction, or, for a transaction too large to hold, its
// overflow (whose rows were never kept).
type Txn struct {
	// LSN is the transaction's commit LSN: the entry's, which Decode sets.
	LSN change.LSN `json:"-"`
	// XID8 and End are the transaction's id and the end of its commit record: what a table
	// snapshot's hand-off judges a transaction by. Zero in an entry written before they were
	// kept.
	XID8     change.XID8      `json:"x,omitempty"`
	End      change.LSN       `json:"n,omitzero"`
	Events   []Event          `json:"e,omitempty"`
	Overflow *change.Overflow `json:"o,omitempty"`
}

// Event is one change of a Txn.
type Event struct {
	// Idx is the change's 1-based index in the whole transaction: its position's idx.
	Idx uint32 `json:"i"`
	change.Event
	// Key carries change.Event.Key, which its own JSON leaves out.
	Key []string `json:"k,omitempty"`
}

// Encode returns the payload of txn's changes at the (0-based) indexes idx, and its overflow.
// It writes each change with change.Event.AppendJSON, without reflection: the replicator runs
// it for every table of every transaction.
func Encode(txn *change.Txn, idx []int) ([]byte, error) {
	b := make([]byte, 0, 256*len(idx)+48)
	b = append(b, '{')
	if txn.XID8 != 0 {
		b = append(b, `"x":`...)
		b = strconv.AppendUint(b, uint64(txn.XID8), 10)
		b = append(b, ',')
	}
	if txn.EndLSN != 0 {
		b = append(b, `"n":"`...)
		b, _ = txn.EndLSN.AppendText(b)
		b = append(b, `",`...)
	}
	if txn.Overflow != nil {
		of, err := json.Marshal(txn.Overflow)
		if err != nil {
			return nil, err
		}
		b = append(b, `"o":`...)
		b = append(b, of...)
		b = append(b, ',')
	}
	if len(idx) > 0 {
		b = append(b, `"e":[`...)
		for k, i := range idx {
			if k > 0 {
				b = append(b, ',')
			}
			e := &txn.Events[i]
			b = append(b, `{"i":`...)
			b = strconv.AppendUint(b, uint64(i+1), 10)
			if len(e.Key) > 0 {
				b = append(b, `,"k":[`...)
				for j, c := range e.Key {
					if j > 0 {
						b = append(b, ',')
					}
					b = change.AppendJSONString(b, c)
				}
				b = append(b, ']')
			}
			// The event's own object, its opening brace replaced by the comma after ours.
			n := len(b)
			b = e.AppendJSON(b)
			b[n] = ','
		}
		b = append(b, "],"...)
	}
	if b[len(b)-1] == ',' {
		b = b[:len(b)-1]
	}
	return append(b, '}'), nil
}

// Decode reads a payload Encode made, of the entry at lsn: the Txn's LSN and each event's.
func Decode(lsn change.LSN, data []byte) (Txn, error) {
	var t Txn
	if err := json.Unmarshal(data, &t); err != nil {
		return Txn{}, fmt.Errorf("history: decode the entry at %s: %w", lsn, err)
	}
	t.LSN = lsn
	last := uint32(0)
	for i := range t.Events {
		e := &t.Events[i]
		if e.Idx <= last {
			return Txn{}, fmt.Errorf("history: the entry at %s has change %d after change %d", lsn, e.Idx, last)
		}
		last = e.Idx
		e.Event.Key, e.Event.LSN = e.Key, lsn
	}
	return t, nil
}
