package changefeed

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeStream connects a pump to a fake walsender, the other end of a Unix socket pair: what is
// written to server reaches the pump as the replication stream, and what the pump sends arrives
// on server. cfg needs no database.
func fakeStream(tb testing.TB, cfg Config, sink Sink) (p *pump, server net.Conn) {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		conns[i] = c
	}
	server, client := conns[0], conns[1]
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = "postgres://fake@localhost/fake"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f, err := New(cfg, sink)
	if err != nil {
		tb.Fatal(err)
	}
	cc, err := pgconn.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		tb.Fatal(err)
	}
	cc.BuildFrontend = newFrontend // as session sets it; Construct builds the frontend with it
	// As session's dialer wraps it.
	rx := &receiver{linger: f.cfg.ReadLinger}
	conn, err := pgconn.Construct(&pgconn.HijackedConn{
		Conn: newSocket(client, rx), Config: cc, ParameterStatuses: map[string]string{}, TxStatus: 'I',
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = server.Close()
		_ = conn.Close(context.Background())
	})
	return newPump(f, conn, rx), server
}

// copyData frames a replication message as the walsender sends it.
func copyData(body []byte) []byte {
	b := []byte{'d'}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(body)))
	return append(b, body...)
}

// xlogData wraps a pgoutput message that starts at walStart.
func xlogData(walStart uint64, m []byte) []byte {
	b := msg{'w'}.u64(walStart).u64(walStart).u64(0)
	return copyData(append(b, m...))
}

// keepalive is a primary keepalive message reporting walEnd.
func keepalive(walEnd uint64, replyRequested bool) []byte {
	reply := byte(0)
	if replyRequested {
		reply = 1
	}
	return copyData(msg{'k'}.u64(walEnd).u64(0).u8(reply))
}

// readFrame reads one protocol message from the client: its type and body.
func readFrame(r io.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
	_, err := io.ReadFull(r, body)
	return head[0], body, err
}

func TestReadDeadlineFollowsEveryStatusUpdate(t *testing.T) {
	// An update sent between periodic ones, here the reply to a keepalive, moves the next
	// periodic update later. The read deadline must move with it: left at the earlier
	// interval's end, it fails every read at once until the next update is due, a busy loop.
	const interval = 100 * time.Millisecond
	p, server := fakeStream(t, Config{StatusInterval: interval, SilenceTimeout: time.Minute},
		SinkFunc(func(context.Context, *change.Txn) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()

	updates := 0
	for updates < 4 {
		typ, body, err := readFrame(server)
		if err != nil {
			t.Fatalf("read from the pump: %v", err)
		}
		if typ != 'd' || len(body) == 0 || body[0] != 'r' {
			continue
		}
		updates++
		if updates == 1 {
			// Half an interval after the first periodic update, the server asks for a reply.
			time.Sleep(interval / 2)
			if _, err := server.Write(keepalive(0, true)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	// A read may end at the deadline once for each periodic update, when the deadline beats
	// the timer that marks the update due.
	if p.timeouts > uint64(updates) {
		t.Errorf("reads ended by the deadline: got %d over %d status updates, want at most %d", p.timeouts, updates, updates)
	}
}

func TestShortXLogDataIsAnError(t *testing.T) {
	p, _ := fakeStream(t, Config{}, SinkFunc(func(context.Context, *change.Txn) error { return nil }))
	for n := 0; n < 24; n++ {
		data := append([]byte{'w'}, make([]byte, n)...)
		err := p.copyData(context.Background(), data)
		var e *Error
		if !errors.As(err, &e) || e.Stage != StageDecode {
			t.Errorf("XLogData of %d bytes: got %v, want a decode error", n, err)
		}
	}
}

// TestQueueIsBoundedByBytes: the queue to the sink holds at most MaxTxnBytes of transactions,
// whatever its count bound says (one larger transaction alone is let in): a transaction that
// does not fit waits until the sink frees room.
func TestQueueIsBoundedByBytes(t *testing.T) {
	p, _ := fakeStream(t, Config{MaxTxnBytes: 10_000, QueueTxns: 64, StatusInterval: time.Hour},
		SinkFunc(func(context.Context, *change.Txn) error { return nil }))
	big := func(lsn change.LSN) handoff {
		row := change.Row{{Name: "v", Value: make([]byte, 6_000)}}
		txn := &change.Txn{CommitLSN: lsn, EndLSN: lsn + 1, Events: []change.Event{{Op: change.Insert, After: row}}}
		return handoff{txn: txn, commit: lsn, end: lsn + 1}
	}
	ctx := context.Background()
	if err := p.enqueue(ctx, big(10)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.enqueue(ctx, big(20)) }()
	select {
	case err := <-done:
		t.Fatalf("a second 6 kB transaction was queued beside the first under a 10 kB bound (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	if n := len(p.handoff); n != 1 {
		t.Fatalf("%d transactions queued, want 1", n)
	}
	// The sink takes the first and frees its bytes: the second goes in.
	h := <-p.handoff
	p.inflight.Add(-1)
	p.free(h.bytes)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, q := len(p.handoff), p.queuedBytes.Load(); n != 1 || q != h.bytes {
		t.Errorf("queue %d transactions of %d bytes, want 1 of %d", n, q, h.bytes)
	}
}

// TestReaderTellsTheSocketWhenATransactionIsOpen: the socket lingers only while a transaction
// or a streamed segment is open, so the reader must tell it when one opens and when it ends.
func TestReaderTellsTheSocketWhenATransactionIsOpen(t *testing.T) {
	p, _ := fakeStream(t, Config{}, SinkFunc(func(context.Context, *change.Txn) error { return nil }))
	steps := []struct {
		what string
		m    msg
		want bool
	}{
		{"relation", relationMsg(false, 0, 'd'), false},
		{"begin", begin(0x100, 7), true},
		{"insert", insert(false, 0, "1", "a", "acme"), true},
		{"commit", commit(0x100, 0x110), false},
		{"stream start", streamStart(9), true},
		{"streamed insert", insert(true, 9, "2", "b", "acme"), true},
		{"stream stop", streamStop(), false}, // the streamed transaction is still open, but nothing more need come
		{"stream start again", streamStart(9), true},
		{"stream stop again", streamStop(), false},
		{"stream commit", streamCommit(9, 0x200, 0x210), false},
	}
	for _, s := range steps {
		if err := p.copyData(context.Background(), xlogData(0, s.m)[5:]); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if got := p.rx.inTxn.Load(); got != s.want {
			t.Fatalf("after %s the socket was told in a transaction = %v, want %v", s.what, got, s.want)
		}
	}
}
