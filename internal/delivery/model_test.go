package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// The state-machine tests drive one Lanes with a program of operations read from bytes, keep a
// small reference model beside it, and check the contract after every step. FuzzQueue lets the
// fuzzer write the programs; TestQueueProperties runs many seeded random ones in go test.

const modelKeys = 4

// fate is what became of one pushed data frame.
type fate uint8

const (
	fateQueued    fate = iota + 1 // admitted, not yet written
	fateWritten                   // admitted and written as data
	fateLost                      // refused; waiting in its key's marker
	fateAnnounced                 // refused and named by a written marker
	fateForgotten                 // refused, and its marker was dropped by Forget or Close
)

// openGap is the model's view of one key's outstanding marker.
type openGap struct {
	first, last int // positions
	lost        uint64
	reason      DropReason
	barrier     uint64 // data frames admitted when it opened
}

type queuedFrame struct {
	key, pos, size int
}

type model struct {
	t   testing.TB
	ctx context.Context // bounds every Next, so a writer that blocks by mistake fails the test
	l   *Lanes
	cfg Config // with defaults applied
	b   Batch

	closed bool
	fates  [modelKeys][]fate // by key, by position
	cursor [modelKeys]int    // next position the key's written stream must show
	gaps   [modelKeys]*openGap
	owed   int // positions whose fate is still fateQueued or fateLost

	data              []queuedFrame // admitted, not yet written, in admission order
	dataBytes         int
	admitted, written uint64
	control           []string // admitted, not yet written
	controlBytes      int
	nextControl       int

	want Stats // what Stats must say
}

func newModel(t testing.TB, cfg Config) *model {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	m := &model{t: t, ctx: ctx, l: newLanes(t, cfg)}
	m.cfg = m.l.cfg
	return m
}

// configFrom makes small bounds out of six bytes, so a short program reaches every edge.
func configFrom(b []byte) Config {
	at := func(i, n int) int { return int(b[i])%n + 1 }
	return Config{
		MaxDataFrames:    at(0, 8),
		MaxDataBytes:     at(1, 48),
		MaxControlFrames: at(2, 4),
		MaxControlBytes:  at(3, 24),
		MaxBatchFrames:   at(4, 5),
		MaxBatchBytes:    at(5, 40),
	}
}

// runProgram interprets prog as operations on a fresh Lanes and its model.
func runProgram(t testing.TB, prog []byte) {
	if len(prog) < 6 {
		return
	}
	m := newModel(t, configFrom(prog))
	prog = prog[6:]
	arg := func() int {
		if len(prog) == 0 {
			return 0
		}
		v := prog[0]
		prog = prog[1:]
		return int(v)
	}
	for len(prog) > 0 {
		switch arg() % 8 {
		case 0, 1, 2:
			m.pushData(arg()%modelKeys, arg()%56)
		case 3:
			m.pushControl(arg() % 14)
		case 4:
			m.next()
		case 5:
			for range arg()%4 + 1 {
				m.next()
			}
		case 6:
			m.forget(arg() % modelKeys)
		case 7:
			if arg()%16 == 0 {
				m.close()
			} else {
				m.drain()
			}
		}
		m.check()
	}
	m.drain()
	m.check()
}

func (m *model) pushData(key, size int) {
	p := len(m.fates[key])
	f := Frame{Head: []byte{'h'}, Body: make([]byte, size), Key: strconv.Itoa(key), Pos: strconv.Itoa(p)}
	size++ // the head

	// The reference rules, written as plainly as possible.
	var want fate
	var reason DropReason
	g := m.gaps[key]
	switch {
	case m.closed:
	case g != nil:
		want, reason = fateLost, g.reason
		g.last, g.lost = p, g.lost+1
	case size > m.cfg.MaxDataBytes:
		want, reason = fateLost, ReasonTooLarge
	case len(m.data) >= m.cfg.MaxDataFrames || m.dataBytes+size > m.cfg.MaxDataBytes:
		want, reason = fateLost, ReasonLaneFull
	default:
		want = fateQueued
	}
	if want == fateLost && g == nil {
		m.gaps[key] = &openGap{first: p, last: p, lost: 1, reason: reason, barrier: m.admitted}
		m.want.Markers++
	}

	got := m.l.PushData(f)
	m.fates[key] = append(m.fates[key], want)
	if want != 0 {
		m.owed++
	}
	switch want {
	case 0:
		m.fates[key][p] = fateForgotten
		m.want.Discarded++
		if got {
			m.t.Fatalf("PushData after Close admitted a frame")
		}
		return
	case fateLost:
		if reason == ReasonLaneFull {
			m.want.LostLaneFull++
		} else {
			m.want.LostTooLarge++
		}
	case fateQueued:
		m.data = append(m.data, queuedFrame{key, p, size})
		m.dataBytes += size
		m.admitted++
		m.want.DataAdmitted++
	}
	if got != (want == fateQueued) {
		m.t.Fatalf("PushData(key %d pos %d, %d bytes) = %v, want %v (queued %d frames/%d bytes, gap %+v)",
			key, p, size, got, !got, len(m.data), m.dataBytes, g)
	}
}

func (m *model) pushControl(size int) {
	body := fmt.Sprintf("%0*d", max(size, 1), m.nextControl)[:max(size, 1)]
	if size == 0 {
		body = ""
	}
	id := strconv.Itoa(m.nextControl)
	m.nextControl++
	// Tag the body with its id at the front so FIFO order is checkable; keep its length.
	if len(body) >= len(id) {
		body = id + body[len(id):]
	}
	err := m.l.PushControl([]byte(body))
	switch {
	case m.closed:
		if !errors.Is(err, ErrClosed) {
			m.t.Fatalf("PushControl after Close = %v, want ErrClosed", err)
		}
		m.want.Discarded++
	case len(m.control) >= m.cfg.MaxControlFrames || m.controlBytes+len(body) > m.cfg.MaxControlBytes:
		if !errors.Is(err, ErrControlFull) {
			m.t.Fatalf("PushControl(%d bytes) = %v, want ErrControlFull", len(body), err)
		}
		m.want.ControlRefused++
	default:
		if err != nil {
			m.t.Fatalf("PushControl(%d bytes) = %v, want nil", len(body), err)
		}
		m.control = append(m.control, body)
		m.controlBytes += len(body)
		m.want.ControlAdmitted++
	}
}

// next takes one batch, through Next when the model says there is work (so Next must not
// block) and TryNext otherwise, and checks it item by item.
func (m *model) next() bool {
	work := len(m.control) > 0 || len(m.data) > 0 || m.anyGap()
	var ok bool
	if work && !m.closed {
		if err := m.l.Next(m.ctx, &m.b); err != nil {
			m.t.Fatalf("Next with work queued = %v", err)
		}
		ok = true
	} else {
		ok = m.l.TryNext(&m.b)
	}
	if m.closed {
		if ok {
			m.t.Fatalf("TryNext after Close returned a batch")
		}
		if err := m.l.Next(m.ctx, &m.b); !errors.Is(err, ErrClosed) {
			m.t.Fatalf("Next after Close = %v, want ErrClosed", err)
		}
		return false
	}
	if !ok {
		// Liveness: the writer finds nothing only when nothing is owed. Once the data lane is
		// drained every marker is ready, so none may be left waiting.
		if work {
			m.t.Fatalf("TryNext found nothing with %d control, %d data queued and gaps %v", len(m.control), len(m.data), m.gaps)
		}
		return false
	}
	m.checkBatch()
	return true
}

func (m *model) checkBatch() {
	items := m.b.Items
	if len(items) == 0 {
		m.t.Fatalf("a batch with no items")
	}
	if len(items) > m.cfg.MaxBatchFrames {
		m.t.Fatalf("batch of %d items, over MaxBatchFrames %d", len(items), m.cfg.MaxBatchFrames)
	}
	if n := m.b.Bytes(); len(items) > 1 && n > m.cfg.MaxBatchBytes {
		m.t.Fatalf("batch of %d bytes in %d items, over MaxBatchBytes %d", n, len(items), m.cfg.MaxBatchBytes)
	}
	writtenBefore := m.written
	var last Kind
	for _, it := range items {
		if (it.Kind == KindMarker) != (it.Marker != nil) || (it.Kind != KindData && it.Head != nil) {
			m.t.Fatalf("%s item with Marker %v and Head %q", it.Kind, it.Marker, it.Head)
		}
		if it.Kind < last {
			m.t.Fatalf("%s item after %s item in one batch", it.Kind, last)
		}
		last = it.Kind
		switch it.Kind {
		case KindControl:
			if len(m.control) == 0 || string(it.Body) != m.control[0] {
				m.t.Fatalf("control %q written, want the oldest queued of %q", it.Body, m.control)
			}
			m.controlBytes -= len(it.Body)
			m.control = m.control[1:]
			m.want.ControlWritten++
		case KindData:
			if len(m.data) == 0 {
				m.t.Fatalf("data %s@%s written with none queued", it.Key, it.Pos)
			}
			q := m.data[0]
			key, p := m.keyPos(it.Key, it.Pos)
			if key != q.key || p != q.pos || it.Size() != q.size {
				m.t.Fatalf("data %d@%d (%d bytes) written, want the oldest admitted %d@%d (%d bytes)", key, p, it.Size(), q.key, q.pos, q.size)
			}
			if f := m.fates[key][p]; f != fateQueued {
				m.t.Fatalf("data %d@%d written, but its fate is %d", key, p, f)
			}
			m.advance(key, p)
			m.fates[key][p] = fateWritten
			m.owed--
			m.data = m.data[1:]
			m.dataBytes -= q.size
			m.written++
			m.want.DataWritten++
		case KindMarker:
			key, _ := m.keyPos(it.Key, "0")
			g := m.gaps[key]
			if g == nil {
				m.t.Fatalf("marker %+v written for a key with no open gap", it.Marker)
			}
			want := Marker{Key: it.Key, Reason: g.reason, First: strconv.Itoa(g.first), Last: strconv.Itoa(g.last), Lost: g.lost}
			if it.Marker == nil || *it.Marker != want {
				m.t.Fatalf("marker %+v written, want %+v", it.Marker, &want)
			}
			if string(it.Body) != string(encodeMarker(nil, want)) {
				m.t.Fatalf("marker body %q, want the encoding of %+v", it.Body, want)
			}
			// The barrier: every frame admitted before the first loss went out in an earlier batch.
			if writtenBefore < g.barrier {
				m.t.Fatalf("marker %+v written after %d data frames, before its barrier %d", want, writtenBefore, g.barrier)
			}
			m.advance(key, g.first)
			for p := g.first; p <= g.last; p++ {
				if m.fates[key][p] != fateLost {
					m.t.Fatalf("marker for key %d covers %d whose fate is %d, not lost", key, p, m.fates[key][p])
				}
				m.fates[key][p] = fateAnnounced
				m.owed--
			}
			m.cursor[key] = g.last + 1
			m.gaps[key] = nil
			m.want.Markers--
			m.want.MarkersEmitted++
		default:
			m.t.Fatalf("item of kind %d", it.Kind)
		}
	}
}

// advance checks that p is where key's written stream must continue: the next position, after
// skipping only positions whose gap was forgotten.
func (m *model) advance(key, p int) {
	for m.cursor[key] < p && m.fates[key][m.cursor[key]] == fateForgotten {
		m.cursor[key]++
	}
	if m.cursor[key] != p {
		m.t.Fatalf("key %d: position %d written where %d must come next", key, p, m.cursor[key])
	}
	m.cursor[key] = p + 1
}

func (m *model) keyPos(key, pos string) (int, int) {
	k, err1 := strconv.Atoi(key)
	p, err2 := strconv.Atoi(pos)
	if err1 != nil || err2 != nil || k < 0 || k >= modelKeys || p < 0 || p >= len(m.fates[k]) {
		m.t.Fatalf("item with key %q pos %q was never pushed", key, pos)
	}
	return k, p
}

func (m *model) drain() {
	for i := 0; m.next(); i++ {
		if i > 10_000 {
			m.t.Fatalf("drain did not end")
		}
	}
	if m.closed {
		return
	}
	// Fully drained: every pushed frame was written, or named by exactly one written marker,
	// or lost to a forgotten one. The count says so cheaply; the scan says which one is not.
	if m.owed == 0 {
		return
	}
	for k := range modelKeys {
		for p, f := range m.fates[k] {
			if f != fateWritten && f != fateAnnounced && f != fateForgotten {
				m.t.Fatalf("key %d position %d has fate %d after a full drain", k, p, f)
			}
		}
	}
	m.t.Fatalf("%d positions owed after a full drain, but none found", m.owed)
}

func (m *model) forget(key int) {
	m.l.Forget(strconv.Itoa(key))
	g := m.gaps[key]
	if g == nil {
		return
	}
	for p := g.first; p <= g.last; p++ {
		m.fates[key][p] = fateForgotten
		m.owed--
	}
	m.gaps[key] = nil
	m.want.Markers--
	m.want.MarkersForgotten++
}

func (m *model) close() {
	m.l.Close()
	if m.closed {
		return
	}
	m.closed = true
	m.want.Discarded += uint64(len(m.control) + len(m.data))
	for k := range modelKeys {
		if m.gaps[k] != nil {
			m.want.MarkersForgotten++
		}
		m.gaps[k] = nil
	}
	m.control, m.data = nil, nil
	m.controlBytes, m.dataBytes = 0, 0
	m.want.Markers = 0
}

func (m *model) anyGap() bool {
	for _, g := range m.gaps {
		if g != nil {
			return true
		}
	}
	return false
}

// check compares the counters with the model and the Lanes' private state with itself.
func (m *model) check() {
	m.want.DataFrames, m.want.DataBytes = int64(len(m.data)), int64(m.dataBytes)
	m.want.ControlFrames, m.want.ControlBytes = int64(len(m.control)), int64(m.controlBytes)
	if got := m.l.Stats(); got != m.want {
		m.t.Fatalf("Stats = %+v\nwant    %+v", got, m.want)
	}

	l := m.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.datBytes < 0 || l.ctlBytes < 0 || l.datBytes != m.dataBytes || l.ctlBytes != m.controlBytes {
		m.t.Fatalf("lane bytes data %d control %d, want %d and %d", l.datBytes, l.ctlBytes, m.dataBytes, m.controlBytes)
	}
	if l.admitted-l.taken != uint64(l.data.len()) {
		m.t.Fatalf("admitted %d - taken %d != %d queued", l.admitted, l.taken, l.data.len())
	}
	// At most one marker per key, the list and the map agree, and barriers never decrease.
	seen := map[string]bool{}
	var prev *marker
	for mk := l.markers.head; mk != nil; prev, mk = mk, mk.next {
		if seen[mk.Key] {
			m.t.Fatalf("two outstanding markers for key %s", mk.Key)
		}
		seen[mk.Key] = true
		if l.markers.byKey[mk.Key] != mk {
			m.t.Fatalf("marker list and map disagree on key %s", mk.Key)
		}
		if mk.prev != prev {
			m.t.Fatalf("marker list back link broken at key %s", mk.Key)
		}
		if prev != nil && prev.barrier > mk.barrier {
			m.t.Fatalf("marker barriers out of order: %d then %d", prev.barrier, mk.barrier)
		}
	}
	if l.markers.tail != prev || len(seen) != len(l.markers.byKey) {
		m.t.Fatalf("marker list holds %d, map %d", len(seen), len(l.markers.byKey))
	}
}

func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 1, 2, 4, 4})
	f.Add([]byte{1, 40, 1, 10, 0, 39, 0, 0, 5, 1, 1, 3, 2, 0, 2, 1, 0, 3, 5, 3, 7, 1})
	f.Add([]byte{3, 20, 3, 20, 2, 20, 0, 1, 50, 0, 1, 1, 6, 1, 0, 2, 3, 3, 4, 7, 1, 0, 0, 3, 7, 0})
	f.Add([]byte{7, 47, 3, 23, 4, 39, 0, 0, 1, 0, 1, 2, 0, 2, 3, 0, 3, 4, 0, 0, 5, 0, 1, 6, 5, 3, 6, 2, 7, 16})
	f.Fuzz(func(t *testing.T, prog []byte) {
		// The small bounds make a short program reach every edge; a long one only slows the
		// fuzzer, and TestQueueProperties runs long ones.
		runProgram(t, prog[:min(len(prog), 1024)])
	})
}

// TestQueueProperties runs many random programs from a fixed seed, so a failure reproduces.
func TestQueueProperties(t *testing.T) {
	programs, length := 200, 3000
	if testing.Short() {
		programs = 50
	}
	r := rand.New(rand.NewPCG(2024, 1))
	prog := make([]byte, length)
	for i := range programs {
		for j := range prog {
			prog[j] = byte(r.Uint32())
		}
		// Closing ends a program's interesting life; make it rare here, the fuzzer covers it.
		for j := 6; j < len(prog); j++ {
			if prog[j]%8 == 7 && j+1 < len(prog) && prog[j+1]%16 == 0 && r.IntN(8) != 0 {
				prog[j+1]++
			}
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) { runProgram(t, prog) })
	}
}
