//go:build !linux

package changefeed

import "net"

// newSocket leaves the connection as it is outside Linux: reads go through net.Conn, and the
// receiver's linger does not apply.
func newSocket(c net.Conn, _ *receiver) net.Conn { return c }
