package sse

import (
	"io"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
)

// TestTryComment: a keepalive to a stream whose socket takes it is written at once, as one
// chunk, even past a deadline an earlier write left; one that would wait (another write holding
// the stream, or a socket with no room) is left to comment, never claimed as written.
func TestTryComment(t *testing.T) {
	nc, client := testenv.TCPPair(t)
	raw, err := nc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	tr := &rawTransport{nc: nc, raw: raw, chunked: true, slow: time.Second, done: make(chan struct{})}
	tr.wdl = time.Now().Add(-time.Minute) // a write's deadline, long passed
	if err := nc.SetWriteDeadline(tr.wdl); err != nil {
		t.Fatal(err)
	}
	if ok, err := tr.tryComment(); !ok || err != nil {
		t.Fatalf("tryComment on an idle stream = %v, %v; want it written", ok, err)
	}
	want := "8\r\n: ping\n\n\r\n"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(client, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want the comment as one chunk, %q", got, err, want)
	}

	tr.mu.Lock() // a batch being written
	if ok, _ := tr.tryComment(); ok {
		t.Fatal("tryComment claimed a keepalive while another write held the stream")
	}
	tr.mu.Unlock()

	// The client reads nothing more: fill the socket until a write would wait.
	_ = client.SetReadBuffer(4096)
	chunk := make([]byte, 64<<10)
	for {
		tr.wdl = time.Now().Add(50 * time.Millisecond) // tryComment lifts it, so the write is tried
		if err := nc.SetWriteDeadline(tr.wdl); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(chunk); err != nil {
			break
		}
	}
	if ok, err := tr.tryComment(); ok && err == nil {
		t.Fatal("tryComment claimed a keepalive written to a socket with no room")
	}
}
