package server

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestListenLiveness: a connection accepted by listen carries TCP_USER_TIMEOUT and a keepalive
// idle time of twice the ping interval, handed on from the listening socket.
func TestListenLiveness(t *testing.T) {
	ln, err := listen("127.0.0.1:0", 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var user, idle int
	var uerr, ierr error
	if err := rc.Control(func(fd uintptr) {
		user, uerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
		idle, ierr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
	}); err != nil {
		t.Fatal(err)
	}
	if uerr != nil || ierr != nil {
		t.Fatal(uerr, ierr)
	}
	if user != 20000 || idle != 20 {
		t.Errorf("TCP_USER_TIMEOUT %d ms and TCP_KEEPIDLE %d s, want 20000 and 20", user, idle)
	}
}
