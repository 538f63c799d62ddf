package changefeed

import (
	"sync/atomic"
	"time"
)

// DefaultReadLinger is Config.ReadLinger's default.
const DefaultReadLinger = 100 * time.Microsecond

// MaxReadLinger bounds Config.ReadLinger: a longer wait would let the server's socket buffer
// fill, so that it waits on us, and would hold a stop for as long.
const MaxReadLinger = time.Millisecond

// receiver is what the reader goroutine tells the replication connection's socket: whether the
// stream is in the middle of a transaction, and so whether the socket lingers.
//
// The linger: when a read empties the socket in the middle of a transaction, the next read first
// waits ReadLinger. The server sends each change as a message of its own, one send(2) per change,
// and a reader that keeps up with it finds one or two messages per read, parks on the poller in
// between, and is woken by nearly every send: a context switch on both sides per few changes,
// and a wakeup the sender pays for inside its send. Waiting a moment lets a hundred or so
// messages gather for one read. It delays no transaction by more than one linger: the wait is
// taken only while a transaction is open, none of whose changes can be handed on before its
// commit arrives, and the server keeps sending meanwhile (its socket buffer holds far more than
// one linger's worth). Between transactions a read waits on the poller as usual, so a lone
// small transaction is read the moment it arrives. Linux only (see socket), over TCP and Unix
// sockets alike: a reader that lingers is in nanosleep(2), not waiting on the socket, so the
// server's sends meanwhile wake nobody. (While the socket was in the runtime's poller, every send
// woke a poller thread all the same, and over TCP the linger cost the server more than it saved.)
type receiver struct {
	linger time.Duration
	inTxn  atomic.Bool // set by the reader goroutine, read by the socket's reads
}

// lingering reports whether a read that follows one that emptied the socket should wait first.
func (r *receiver) lingering() bool { return r.linger > 0 && r.inTxn.Load() }
