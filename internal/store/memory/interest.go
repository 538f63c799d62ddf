package memory

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/interest"
)

// Interest is the interest index of one process. See interest.Store for the contract; rows of a
// socket past its deadline are invisible at once and reaped by the owner's next write, as on
// Redis.
type Interest struct {
	cfg interest.Config  // read-only
	now func() time.Time // read-only; tests move it

	mu     sync.Mutex
	owners map[string]*owner // guarded by mu
}

var _ interest.Store = (*Interest)(nil)

type owner struct {
	tokens     map[string]map[ref]interest.Row // token -> rows; a token is here only while it has rows
	sockets    map[string]*socket
	identities map[string]int // identity -> rows held
	gen        uint64
	mark       uint64    // the highest Stamp
	genUntil   time.Time // the generation and the mark are forgotten after it, as a Redis key's TTL would
	deadlines  deadlineHeap
}

type ref struct{ socket, sub string }

type socket struct {
	name     string
	deadline time.Time
	idx      int               // in owner.deadlines, or -1
	subs     map[string]string // sub -> token
	identity map[string]string // sub -> identity
}

// NewInterest returns an empty index.
func NewInterest(cfg interest.Config) (*Interest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Interest{cfg: cfg.WithDefaults(), now: time.Now, owners: map[string]*owner{}}, nil
}

// ownerLocked returns owner o, creating it when create is set; nil otherwise when absent. It
// collects the owner's dead sockets first, and forgets a generation past its TTL.
func (m *Interest) ownerLocked(o string, now time.Time, create bool) *owner {
	ow := m.owners[o]
	if ow != nil && len(ow.sockets) == 0 && now.After(ow.genUntil) {
		delete(m.owners, o)
		ow = nil
	}
	if ow == nil {
		if !create {
			return nil
		}
		ow = &owner{tokens: map[string]map[ref]interest.Row{}, sockets: map[string]*socket{}, identities: map[string]int{}}
		m.owners[o] = ow
	}
	return ow
}

// sweepBudget is how many other owners an Add looks at to forget the empty ones whose
// generation expired: constant work per Add, and owners go at least as fast as they come.
const sweepBudget = 4

// sweepLocked forgets up to sweepBudget owners with no live socket and an expired generation.
// Map iteration starts at a random place, so every owner is looked at in time.
func (m *Interest) sweepLocked(now time.Time) {
	n := 0
	for o, ow := range m.owners {
		if n++; n > sweepBudget {
			return
		}
		ow.pruneLocked(now)
		if len(ow.sockets) == 0 && now.After(ow.genUntil) {
			delete(m.owners, o)
		}
	}
}

// pruneLocked reaps the sockets of ow past their deadline. It reports whether it dropped rows.
func (ow *owner) pruneLocked(now time.Time) bool {
	dropped := false
	for len(ow.deadlines) > 0 && ow.deadlines[0].deadline.Before(now) {
		dropped = ow.reapLocked(ow.deadlines[0].name) || dropped
	}
	return dropped
}

func (ow *owner) reapLocked(sock string) bool {
	s := ow.sockets[sock]
	if s == nil {
		return false
	}
	for sub := range s.subs {
		ow.dropLocked(sock, s, sub)
	}
	ow.forgetLocked(s)
	return true
}

// forgetLocked removes a socket that holds nothing.
func (ow *owner) forgetLocked(s *socket) {
	if s.idx >= 0 {
		heap.Remove(&ow.deadlines, s.idx)
	}
	delete(ow.sockets, s.name)
}

// dropLocked removes one row; its token stops being watched only when its last row went.
func (ow *owner) dropLocked(sock string, s *socket, sub string) {
	tok, id := s.subs[sub], s.identity[sub]
	delete(s.subs, sub)
	delete(s.identity, sub)
	rows := ow.tokens[tok]
	delete(rows, ref{sock, sub})
	if len(rows) == 0 {
		delete(ow.tokens, tok)
	}
	if ow.identities[id]--; ow.identities[id] <= 0 {
		delete(ow.identities, id)
	}
}

func (m *Interest) bumpLocked(ow *owner, now time.Time) uint64 {
	ow.gen++
	ow.genUntil = now.Add(m.cfg.GenerationTTL)
	return ow.gen
}

func (ow *owner) touchLocked(s *socket, until time.Time) {
	s.deadline = until
	if s.idx < 0 {
		heap.Push(&ow.deadlines, s)
	} else {
		heap.Fix(&ow.deadlines, s.idx)
	}
}

// Add files r under o.
func (m *Interest) Add(ctx context.Context, o string, r interest.Row) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := interest.CheckRow(o, r); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.sweepLocked(now)
	ow := m.ownerLocked(o, now, true)
	ow.pruneLocked(now)
	s := ow.sockets[r.Socket]
	if s != nil {
		if _, dup := s.subs[r.Sub]; dup {
			return 0, interest.DuplicateError(r.Sub)
		}
	}
	if ow.identities[r.Identity] >= m.cfg.MaxPerIdentity {
		return 0, interest.LimitError(m.cfg.MaxPerIdentity)
	}
	if s == nil {
		s = &socket{name: r.Socket, idx: -1, subs: map[string]string{}, identity: map[string]string{}}
		ow.sockets[r.Socket] = s
	}
	// The row lands before its token is watched: in this map the two are one step.
	r.Data = append([]byte(nil), r.Data...)
	rows := ow.tokens[r.Token]
	if rows == nil {
		rows = map[ref]interest.Row{}
		ow.tokens[r.Token] = rows
	}
	rows[ref{r.Socket, r.Sub}] = r
	s.subs[r.Sub] = r.Token
	s.identity[r.Sub] = r.Identity
	ow.identities[r.Identity]++
	ow.touchLocked(s, now.Add(m.cfg.TTL))
	return m.bumpLocked(ow, now), nil
}

// Remove drops socket's sub.
func (m *Interest) Remove(ctx context.Context, o, sock, sub string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for _, f := range [...]struct{ what, v string }{{"owner", o}, {"socket", sock}, {"sub", sub}} {
		if err := interest.CheckName(f.what, f.v); err != nil {
			return 0, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	ow := m.ownerLocked(o, now, false)
	if ow == nil {
		return 0, interest.NotFoundError(sub)
	}
	ow.pruneLocked(now)
	s := ow.sockets[sock]
	if s == nil {
		return 0, interest.NotFoundError(sub)
	}
	if _, ok := s.subs[sub]; !ok {
		return 0, interest.NotFoundError(sub)
	}
	ow.dropLocked(sock, s, sub)
	if len(s.subs) == 0 {
		ow.forgetLocked(s)
	}
	return m.bumpLocked(ow, now), nil
}

// Reap drops everything socket holds under o.
func (m *Interest) Reap(ctx context.Context, o, sock string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := interest.CheckOwnerSocket(o, sock); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	ow := m.ownerLocked(o, now, false)
	if ow == nil {
		return 0, nil
	}
	pruned := ow.pruneLocked(now)
	if ow.reapLocked(sock) || pruned {
		return m.bumpLocked(ow, now), nil
	}
	return ow.gen, nil
}

// Refresh renews socket's deadline.
func (m *Interest) Refresh(ctx context.Context, o, sock string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := interest.CheckOwnerSocket(o, sock); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	ow := m.ownerLocked(o, now, false)
	if ow == nil {
		return 0, nil
	}
	// A socket refreshing late, before anyone reaped it, keeps its rows: renew first.
	s := ow.sockets[sock]
	if s != nil {
		ow.touchLocked(s, now.Add(m.cfg.TTL))
	}
	if ow.pruneLocked(now) {
		m.bumpLocked(ow, now)
	}
	if s == nil {
		return 0, nil
	}
	return len(s.subs), nil
}

// Watched reports which tokens have rows.
func (m *Interest) Watched(ctx context.Context, o string, tokens []string) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := interest.CheckName("owner", o); err != nil {
		return nil, err
	}
	out := make([]bool, len(tokens))
	m.mu.Lock()
	defer m.mu.Unlock()
	ow := m.ownerLocked(o, m.now(), false)
	if ow == nil {
		return out, nil
	}
	for i, t := range tokens {
		_, out[i] = ow.tokens[t]
	}
	return out, nil
}

// Rows returns the live rows under tokens.
func (m *Interest) Rows(ctx context.Context, o string, tokens []string) ([]interest.Row, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := interest.CheckName("owner", o); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	ow := m.ownerLocked(o, now, false)
	if ow == nil {
		return nil, nil
	}
	var out []interest.Row
	seen := map[string]bool{}
	for _, t := range tokens {
		if seen[t] {
			continue
		}
		seen[t] = true
		for _, r := range ow.tokens[t] {
			if s := ow.sockets[r.Socket]; s != nil && !s.deadline.Before(now) {
				r.Data = append([]byte(nil), r.Data...)
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// read runs f on owner o (nil when it has no state) under mu, after checking ctx and o: the
// reads that create nothing.
func read[T any](m *Interest, ctx context.Context, o string, f func(ow *owner, now time.Time) T) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := interest.CheckName("owner", o); err != nil {
		return zero, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	ow := m.ownerLocked(o, now, false)
	if ow == nil {
		return zero, nil
	}
	return f(ow, now), nil
}

// Generation returns o's generation.
func (m *Interest) Generation(ctx context.Context, o string) (uint64, error) {
	return read(m, ctx, o, func(ow *owner, _ time.Time) uint64 { return ow.gen })
}

// deadlineHeap orders an owner's sockets by deadline, each socket once; socket.idx is its place.
type deadlineHeap []*socket

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *deadlineHeap) Push(x any) {
	s := x.(*socket)
	s.idx = len(*h)
	*h = append(*h, s)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	s.idx = -1
	*h = old[:len(old)-1]
	return s
}

// Probe returns o's generation and which of tokens are watched.
func (m *Interest) Probe(ctx context.Context, o string, tokens []string) (uint64, []bool, error) {
	return m.probe(ctx, o, 0, false, tokens)
}

// Stamp raises o's mark, then probes.
func (m *Interest) Stamp(ctx context.Context, o string, mark uint64, tokens []string) (uint64, []bool, error) {
	return m.probe(ctx, o, mark, true, tokens)
}

func (m *Interest) probe(ctx context.Context, o string, mark uint64, stamp bool, tokens []string) (uint64, []bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if err := interest.CheckName("owner", o); err != nil {
		return 0, nil, err
	}
	for _, t := range tokens {
		if err := interest.CheckToken(t); err != nil {
			return 0, nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	watched := make([]bool, len(tokens))
	ow := m.ownerLocked(o, now, stamp)
	if ow == nil {
		return 0, watched, nil
	}
	if stamp {
		ow.mark = max(ow.mark, mark)
		if until := now.Add(m.cfg.GenerationTTL); until.After(ow.genUntil) {
			ow.genUntil = until
		}
	}
	for i, t := range tokens {
		_, watched[i] = ow.tokens[t]
	}
	return ow.gen, watched, nil
}

// Mark returns o's mark.
func (m *Interest) Mark(ctx context.Context, o string) (uint64, error) {
	return read(m, ctx, o, func(ow *owner, _ time.Time) uint64 { return ow.mark })
}

// Sockets returns o's live sockets.
func (m *Interest) Sockets(ctx context.Context, o string) ([]string, error) {
	return read(m, ctx, o, func(ow *owner, now time.Time) []string {
		var out []string
		for name, s := range ow.sockets {
			if len(s.subs) > 0 && !s.deadline.Before(now) {
				out = append(out, name)
			}
		}
		return out
	})
}
