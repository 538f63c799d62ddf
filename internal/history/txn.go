package history

import (
	"encoding/json"
	"fmt"

	"github.com/heraldrt/herald/internal/change"
)

// Txn is what an entry's payload holds: one transaction's changes to the entry's table, each
// with its index in the whole transaction, or, for a transaction too large to hold, its
// overflow (whose rows were never kept).
type Txn struct {
	// LSN is the transaction's commit LSN: the entry's, which Decode sets.
	LSN      change.LSN       `json:"-"`
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
func Encode(txn *change.Txn, idx []int) ([]byte, error) {
	t := Txn{Overflow: txn.Overflow, Events: make([]Event, 0, len(idx))}
	for _, i := range idx {
		e := &txn.Events[i]
		t.Events = append(t.Events, Event{Idx: uint32(i + 1), Event: *e, Key: e.Key})
	}
	return json.Marshal(&t)
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
