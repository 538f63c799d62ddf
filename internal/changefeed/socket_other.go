//go:build !linux

package changefeed

import "net"

// rawReads says whether socket reads with raw read(2) calls; only on Linux.
const rawReads = false

// newSocket leaves the connection as it is outside Linux: reads go through net.Conn, and the
// receiver's linger does not apply.
func newSocket(c net.Conn, _ *receiver) net.Conn { return c }
