package changefeed

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// lockClass is the first key of the leader's advisory lock, "HRLD"; the second is the hash of
// the slot name, so feeds of different slots never contend.
const lockClass = 0x48524c44

// goodbyeTimeout bounds the final status update and Terminate of a clean stop.
const goodbyeTimeout = 5 * time.Second

// session is one replication connection's life: connect, win the leader lock, preflight,
// stream. It returns errStandby when another process leads, nil when ctx ends, and otherwise
// why the stream died.
func (f *Feed) session(ctx context.Context) error {
	log := f.cfg.Logger.With("slot", f.cfg.Slot)
	cc, err := ConnConfig(f.cfg.DatabaseURL, true)
	if err != nil {
		return err
	}
	cc.BuildFrontend = newFrontend
	rx := &receiver{linger: f.cfg.ReadLinger}
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newSocket(c, rx), nil
	}
	connectCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := pgconn.ConnectConfig(connectCtx, cc)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if e := refusedAuth(err, f.cfg.DatabaseURL); e != nil {
			return e
		}
		e := pgError(StageConnect, "connect for replication", err)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			// The walsender refuses a role without REPLICATION before any query can run.
			e.Stage = StagePreflight
			e.Detail = fmt.Sprintf("role %q lacks the REPLICATION attribute: %s", cc.User, pe.Message)
			e.Fix = fmt.Sprintf("ALTER ROLE %s REPLICATION;", quoteIdent(cc.User))
		}
		return e
	}
	// Whatever happens below, the connection is let go. A clean stop has already said goodbye
	// and closed it; on an error, Close's own deadline bounds the Terminate.
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), goodbyeTimeout)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()

	// The lock lives on the replication connection itself: it is released exactly when the
	// stream's session ends, however it ends, so a standby takes over within one poll.
	rows, err := query(ctx, conn, fmt.Sprintf("SELECT pg_try_advisory_lock(%d, hashtext(%s))", lockClass, quoteLiteral(f.cfg.Slot)))
	if err != nil {
		return pgError(StageLeader, "take the leader lock", err)
	}
	if len(rows) != 1 || string(rows[0][0]) != "t" {
		return errStandby
	}
	f.update(func(s *Stats) { s.Leader = true })
	defer f.update(func(s *Stats) { s.Leader, s.Streaming = false, false })
	log.Info("leading the slot")

	slot, err := preflight(ctx, conn, &f.cfg, func(msg string, args ...any) { log.Info(msg, args...) })
	if err != nil {
		return err
	}
	if f.cfg.TemporarySlot && f.resumeEnd != 0 {
		log.Warn("the temporary slot died with the last connection; changes committed while it was down are not streamed",
			"last_confirmed", f.resumeEnd)
	}

	// pgoutput sends 32-bit xids; each is widened to its XID8 against the one before it,
	// starting from the server's next xid now (its snapshot's xmax, which assigns no xid):
	// every transaction the slot still holds lies within 2^31 of it.
	xidRef, err := nextXID(ctx, conn)
	if err != nil {
		return err
	}

	// Resume after what was confirmed. Failing that, from the commit LSN the consumer says it
	// has seen: Postgres resends that transaction and the assembler drops it.
	start := f.resumeEnd
	if start == 0 {
		start = f.resumeCommit
	}
	if start != 0 && slot.confirmed > start {
		log.Warn("the slot has confirmed past the requested position; Postgres starts from the slot's position",
			"requested", start, "slot_confirmed", slot.confirmed)
	}
	args := []string{
		"proto_version '2'",
		"publication_names " + quoteLiteral(quoteIdent(f.cfg.Publication)),
		"messages 'true'",
		"streaming 'on'",
	}
	if err := pglogrepl.StartReplication(ctx, conn, quoteIdent(f.cfg.Slot), pglogrepl.LSN(start),
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return pgError(StageStream, "start replication", err)
	}
	log.Info("streaming", "from", start, "publication", f.cfg.Publication)
	if f.cfg.OnStream != nil {
		f.cfg.OnStream(max(start, slot.confirmed))
	}
	f.update(func(s *Stats) { s.Streaming, s.Failure, s.ConfirmFailures = true, "", 0 })

	p := newPump(f, conn, rx)
	p.asm.skipThrough = f.resumeCommit
	p.asm.xidRef = xidRef
	p.asm.text = messageText(conn.ParameterStatus("server_encoding"))
	p.accepted.Store(uint64(start))
	p.confirmed = start
	return p.run(ctx)
}

// nextXID reads the XID8 the server assigns next, without assigning one.
func nextXID(ctx context.Context, conn *pgconn.PgConn) (change.XID8, error) {
	rows, err := query(ctx, conn, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
	if err != nil {
		return 0, pgError(StagePreflight, "read the next transaction id (pg_current_snapshot)", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, &Error{Stage: StagePreflight, Detail: "pg_current_snapshot() returned no row"}
	}
	v, err := strconv.ParseUint(string(rows[0][0]), 10, 64)
	if err != nil || v == 0 {
		return 0, &Error{Stage: StagePreflight, Detail: fmt.Sprintf("pg_current_snapshot() gave xmax %q, not a transaction id", rows[0][0]), Err: err}
	}
	return change.XID8(v), nil
}

// newPump makes the pump of one stream over conn, whose socket rx speaks to.
func newPump(f *Feed, conn *pgconn.PgConn, rx *receiver) *pump {
	return &pump{
		f:       f,
		conn:    conn,
		rx:      rx,
		asm:     newAssembler(newDecoder(f.follower(), f.cfg.TenantColumn), &f.cfg),
		handoff: make(chan handoff, f.cfg.QueueTxns),
		room:    make(chan struct{}, 1),
		sinkErr: make(chan error, 1),
	}
}

// readBufferSize is how much one read of the replication connection may take in. Each change
// is a message of its own, and pgproto3 reads at most 8 kB at a time: when the reader falls
// behind, this takes a few hundred messages per read system call instead of some fifty. It
// adds no wait, since a read returns whatever has arrived.
const readBufferSize = 64 << 10

// newFrontend is pgconn's default frontend over a larger read buffer.
func newFrontend(r io.Reader, w io.Writer) *pgproto3.Frontend {
	return pgproto3.NewFrontend(bufio.NewReaderSize(r, readBufferSize), w)
}

// follower says whether a table's changes are handed on: every configured table, or every
// table of the publication when none are configured.
func (f *Feed) follower() func(string) bool {
	if len(f.cfg.Tables) == 0 {
		return func(string) bool { return true }
	}
	set := map[string]bool{}
	for _, t := range f.cfg.Tables {
		set[t] = true
	}
	return func(t string) bool { return set[t] }
}

// handoff is one committed transaction on its way to the sink. txn is nil for one that needs
// no Accept (a replay, or one with no followed change) but whose end may be confirmed in turn.
type handoff struct {
	txn    *change.Txn
	commit change.LSN
	end    change.LSN
	bytes  int64 // the transaction's estimated memory, counted in pump.queuedBytes
}

// pump moves one live stream. The reader goroutine (run) owns the connection: it receives,
// decodes, assembles, sends every status update, and hands committed transactions to a bounded
// queue. The sink goroutine drains that queue into the Sink. The reader never blocks on the
// sink without still sending status, so a slow sink cannot make the server time us out.
type pump struct {
	f       *Feed
	conn    *pgconn.PgConn
	rx      *receiver
	asm     *assembler
	handoff chan handoff
	sinkErr chan error

	accepted       atomic.Uint64 // end LSN of the last transaction the sink accepted (sink goroutine writes)
	acceptedCommit atomic.Uint64 // its commit LSN
	inflight       atomic.Int64  // handoffs queued or being accepted
	// queuedBytes is the estimated memory of the transactions queued or being accepted. The
	// queue holds at most QueueTxns of them and, besides, at most MaxTxnBytes of them (one
	// larger transaction alone is let in): a count alone would let 64 transactions of 256 MiB
	// each wait at once. room carries one token from the sink each time it frees some.
	queuedBytes atomic.Int64
	room        chan struct{}
	// wake tells the reader it has more to do than receive: a status update may be due, ctx
	// may have ended, or the sink may have refused a transaction. A timer, ctx and the sink
	// goroutine set it; the reader tests it once per message, an atomic load, and reads the
	// clock and checks the rest only when it is set.
	wake atomic.Bool

	// owned by the reader goroutine
	inTxn        bool       // as last told to rx
	confirmed    change.LSN // last position sent to the server
	idle         change.LSN // a keepalive's WAL end, received while nothing was in flight
	serverEnd    change.LSN
	lastRecv     time.Time // as of the last status check that saw messages arrive
	lastStatus   time.Time
	received     uint64 // messages received
	timeouts     uint64 // reads that the deadline ended
	receivedSeen uint64 // received, as of lastRecv
}

func (p *pump) run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.drain(ctx)
	}()
	// A cancelled ctx wakes a blocked read through its deadline; the read itself runs without a
	// context, since watching one per message would cost a goroutine handoff per message.
	stopWake := context.AfterFunc(ctx, func() {
		p.wake.Store(true)
		_ = p.conn.Conn().SetReadDeadline(time.Now())
	})

	err := p.read(ctx)

	stopWake()
	if errors.Is(err, errSilent) {
		// The connection is black-holed: no goodbye, nothing awaited. Its socket is closed at
		// once, and the unconfirmed tail is streamed again to the next connection and dropped
		// there by its commit LSN.
		_ = p.conn.Conn().Close()
	}
	// What is already queued is committed work: on an error the sink still takes it, so the
	// next session resumes after it. On a stop, ctx makes Accept give up.
	close(p.handoff)
	wg.Wait()
	p.settle()
	if err == nil && ctx.Err() != nil {
		p.goodbye()
		return nil
	}
	return err
}

// settle records, for the next session, how far the sink got.
func (p *pump) settle() {
	end := change.LSN(p.accepted.Load())
	if p.inflight.Load() == 0 && p.idle > end {
		end = p.idle
	}
	if end > p.f.resumeEnd {
		p.f.resumeEnd = end
	}
	if c := change.LSN(p.acceptedCommit.Load()); c > p.f.resumeCommit {
		p.f.resumeCommit = c
	}
}

// goodbye confirms the final position and ends the session the polite way.
func (p *pump) goodbye() {
	_ = p.conn.Conn().SetDeadline(time.Now().Add(goodbyeTimeout))
	_ = p.sendStatus(false)
}

var errSilent = errors.New("silent connection")

// drain is the sink goroutine.
func (p *pump) drain(ctx context.Context) {
	for h := range p.handoff {
		if h.txn != nil && (len(h.txn.Events) > 0 || h.txn.Overflow != nil) {
			if err := p.f.sink.Accept(ctx, h.txn); err != nil {
				select {
				case p.sinkErr <- err:
				default:
				}
				p.wake.Store(true)
				// Nothing after a refused transaction may be confirmed; the rest of the queue
				// is dropped and streamed again.
				for h := range p.handoff {
					p.inflight.Add(-1)
					p.free(h.bytes)
				}
				return
			}
			n := uint64(len(h.txn.Events))
			p.f.update(func(s *Stats) {
				s.Txns++
				s.Events += n
				s.Accepted = h.commit
				if !h.txn.CommitTime.IsZero() {
					s.LastCommit = h.txn.CommitTime
				}
				if h.txn.Overflow != nil {
					s.Overflows++
				}
			})
		}
		p.acceptedCommit.Store(uint64(h.commit))
		p.accepted.Store(uint64(h.end))
		p.inflight.Add(-1)
		p.free(h.bytes)
	}
}

// free gives back the bytes of a transaction the sink is done with, and tells a reader that
// waits for room.
func (p *pump) free(n int64) {
	if n == 0 {
		return
	}
	p.queuedBytes.Add(-n)
	select {
	case p.room <- struct{}{}:
	default:
	}
}

// read is the reader goroutine's loop.
func (p *pump) read(ctx context.Context) error {
	cfg := &p.f.cfg
	now := time.Now()
	p.lastRecv, p.lastStatus = now, now
	if err := p.conn.Conn().SetReadDeadline(now.Add(cfg.StatusInterval)); err != nil {
		return err
	}
	// The status timer only raises wake; the deadline above is what ends a read that waits.
	timer := time.AfterFunc(cfg.StatusInterval, func() { p.wake.Store(true) })
	defer timer.Stop()
	for {
		if p.wake.Swap(false) {
			if err := p.chores(ctx, timer); err != nil || ctx.Err() != nil {
				return err
			}
		}
		msg, err := p.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				// The deadline is the status interval's end: look at the clock now.
				p.timeouts++
				p.wake.Store(true)
				continue
			}
			return pgError(StageStream, "receive", err)
		}
		p.received++
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := p.copyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgError(StageStream, "stream", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return &Error{Stage: StageStream, Detail: "the server ended the replication stream", Fix: "see the Postgres server log; the stream reconnects on its own"}
		}
	}
}

// chores is what the reader does between messages when wake was set: it takes a refusal from
// the sink, notices a stop, and sends the periodic status update when one is due, re-arming
// timer for the next.
func (p *pump) chores(ctx context.Context, timer *time.Timer) error {
	cfg := &p.f.cfg
	select {
	case err := <-p.sinkErr:
		return &Error{Stage: StageSink, Detail: "the sink refused a transaction: " + err.Error(), Err: err}
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	now := time.Now()
	if now.Sub(p.lastStatus) >= cfg.StatusInterval {
		// Messages are counted rather than timed one by one: what silence needs is whether
		// anything arrived since the last look.
		if p.received != p.receivedSeen {
			p.lastRecv, p.receivedSeen = now, p.received
		}
		if now.Sub(p.lastRecv) >= cfg.SilenceTimeout {
			return &Error{Stage: StageStream, Err: errSilent,
				Detail: fmt.Sprintf("nothing arrived from the server for %s, though each status update asks for a reply", now.Sub(p.lastRecv).Round(time.Second)),
				Fix:    "check the network path to Postgres; the stream reconnects on its own"}
		}
		// Each periodic update asks for a reply, so a quiet but healthy server still
		// proves it is there within one interval.
		if err := p.sendStatus(true); err != nil {
			return err
		}
	}
	// The next update is due an interval after the last one, periodic or not (a keepalive's
	// reply, or one sent while the sink was full), and the read deadline and the timer follow
	// it: a deadline left at an earlier update's interval would fail every read at once until
	// the next was due.
	due := p.lastStatus.Add(cfg.StatusInterval)
	if err := p.conn.Conn().SetReadDeadline(due); err != nil {
		return err
	}
	// A stop that landed just before the new deadline would wait a whole interval.
	if ctx.Err() != nil {
		return nil
	}
	timer.Reset(max(due.Sub(now), 0))
	return nil
}

func (p *pump) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return &Error{Stage: StageDecode, Detail: err.Error(), Err: err}
		}
		end := change.LSN(k.ServerWALEnd)
		p.serverEnd = max(p.serverEnd, end)
		// With nothing partly received and everything handed on accepted, the server's WAL
		// end may be confirmed: no transaction at or before it is still owed to the sink.
		// Without this a quiet publication on a busy server pins WAL forever.
		if !p.asm.open() && p.inflight.Load() == 0 && end > p.idle {
			p.idle = end
		}
		p.f.update(func(s *Stats) { s.ServerEnd = p.serverEnd })
		if k.ReplyRequested {
			return p.sendStatus(false)
		}
	case pglogrepl.XLogDataByteID:
		// WAL start, server WAL end, send time, then the pgoutput message. Read here rather than
		// by pglogrepl.ParseXLogData, which converts the send time, unused, once per change.
		body := data[1:]
		if len(body) < 24 {
			err := fmt.Errorf("XLogData must be at least 24 bytes, got %d", len(body))
			return &Error{Stage: StageDecode, Detail: err.Error(), Err: err}
		}
		walStart := change.LSN(binary.BigEndian.Uint64(body))
		p.serverEnd = max(p.serverEnd, change.LSN(binary.BigEndian.Uint64(body[8:])))
		res, err := p.asm.handle(walStart, body[24:])
		if err != nil {
			return &Error{Stage: StageDecode, Detail: fmt.Sprintf("at %s: %v", walStart, err), Err: err,
				Fix: "report this with the Postgres version; the stream restarts from the last confirmed transaction"}
		}
		if in := p.asm.inTxn(); in != p.inTxn {
			p.inTxn = in
			p.rx.inTxn.Store(in)
		}
		switch {
		case res.txn != nil:
			return p.enqueue(ctx, handoff{txn: res.txn, commit: res.txn.CommitLSN, end: res.txn.EndLSN})
		case res.skipped != 0:
			return p.enqueue(ctx, handoff{end: res.skipped})
		}
	}
	return nil
}

// enqueue hands a committed transaction to the sink goroutine, sending status updates while it
// waits for room: a free slot, and room for its bytes (see queuedBytes).
func (p *pump) enqueue(ctx context.Context, h handoff) error {
	p.inflight.Add(1)
	if h.txn != nil {
		h.bytes = txnBytes(h.txn)
	}
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for waited := false; ; waited = true {
		// send stays nil, and its case never fires, while the bytes do not fit.
		var send chan<- handoff
		if q := p.queuedBytes.Load(); q == 0 || q+h.bytes <= int64(p.f.cfg.MaxTxnBytes) {
			send = p.handoff
			p.queuedBytes.Add(h.bytes)
			if !waited {
				select {
				case send <- h:
					return nil
				default:
				}
			}
		}
		if tick == nil {
			tick = time.NewTicker(p.f.cfg.StatusInterval)
		}
		select {
		case send <- h:
			// Waiting on the sink is not the server falling silent: nothing was read meanwhile.
			p.lastRecv = time.Now()
			return nil
		case <-p.room:
		case err := <-p.sinkErr:
			p.inflight.Add(-1)
			p.unreserve(send, h.bytes)
			return &Error{Stage: StageSink, Detail: "the sink refused a transaction: " + err.Error(), Err: err}
		case <-ctx.Done():
			p.inflight.Add(-1)
			p.unreserve(send, h.bytes)
			return nil
		case <-tick.C:
			if err := p.sendStatus(false); err != nil {
				p.inflight.Add(-1)
				p.unreserve(send, h.bytes)
				return err
			}
		}
		p.unreserve(send, h.bytes)
	}
}

// unreserve gives back bytes enqueue counted for a send that did not happen.
func (p *pump) unreserve(send chan<- handoff, n int64) {
	if send != nil {
		p.queuedBytes.Add(-n)
	}
}

// txnBytes estimates the memory a committed transaction holds while it waits.
func txnBytes(txn *change.Txn) int64 {
	n := int64(0)
	for i := range txn.Events {
		n += int64(eventBytes(&txn.Events[i]))
	}
	return n
}

// position is what may be confirmed: the end of the last transaction the sink accepted, or a
// later idle WAL end when nothing is owed.
func (p *pump) position() change.LSN {
	pos := change.LSN(p.accepted.Load())
	if p.inflight.Load() == 0 && !p.asm.open() && p.idle > pos {
		pos = p.idle
	}
	return max(pos, p.confirmed)
}

// sendStatus sends a standby status update confirming position().
func (p *pump) sendStatus(replyRequested bool) error {
	pos := p.position()
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), p.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(pos),
		WALFlushPosition: pglogrepl.LSN(pos),
		WALApplyPosition: pglogrepl.LSN(pos),
		ReplyRequested:   replyRequested,
	})
	p.lastStatus = time.Now()
	if err != nil {
		p.f.update(func(s *Stats) { s.ConfirmFailures++; s.ConfirmFailuresTotal++ })
		return &Error{Stage: StageConfirm, Detail: "send standby status update: " + safeNetError(err), Err: err,
			Fix: "check the network path to Postgres; the stream reconnects on its own"}
	}
	p.confirmed = pos
	p.f.update(func(s *Stats) { s.Confirmed, s.ConfirmFailures = pos, 0 })
	return nil
}
