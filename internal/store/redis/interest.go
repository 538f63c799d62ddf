package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/interest"
)

// Interest is the interest index on Redis, shared by every node. See interest.Store for the
// contract and the package documentation for its keys.
type Interest struct {
	c   *Client         // read-only
	cfg interest.Config // read-only

	add, remove, reap, refresh, rows, probe, sockets *rueidis.Lua
}

var _ interest.Store = (*Interest)(nil)

// NewInterest returns the interest index on c.
func NewInterest(c *Client, cfg interest.Config) (*Interest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Interest{
		c: c, cfg: cfg.WithDefaults(),
		add:     rueidis.NewLuaScript(addScript),
		remove:  rueidis.NewLuaScript(removeScript),
		reap:    rueidis.NewLuaScript(reapScript),
		refresh: rueidis.NewLuaScript(refreshScript),
		rows:    rueidis.NewLuaScript(rowsScript),
		probe:   rueidis.NewLuaScript(probeScript),
		sockets: rueidis.NewLuaScript(socketsScript),
	}, nil
}

// keepMillis is the TTL of an owner's keys: the backstop that collects an owner nobody writes to
// any more. It is twice the sockets' TTL, so a socket's hash is still there for the write that
// reaps it after its deadline.
func (s *Interest) keepMillis() string { return strconv.FormatInt(2*s.cfg.TTL.Milliseconds(), 10) }

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// ownerKeys returns the four keys every script declares first, and the ARGV prefix they share.
func (s *Interest) ownerKeys(owner string) (keys []string, args []string) {
	tag := ownerTag(owner)
	keys = []string{s.c.key("w", tag), s.c.key("n", tag), s.c.key("l", tag), s.c.key("g", tag)}
	return keys, []string{s.c.prefix + ":", tag}
}

func (s *Interest) tokenKey(owner, token string) string {
	return s.c.key("t", ownerTag(owner)) + ":" + token
}

func (s *Interest) socketKey(owner, socket string) string {
	return s.c.key("s", ownerTag(owner)) + ":" + socket
}

// Add files r under owner.
func (s *Interest) Add(ctx context.Context, owner string, r interest.Row) (uint64, error) {
	if err := interest.CheckRow(owner, r); err != nil {
		return 0, err
	}
	keys, args := s.ownerKeys(owner)
	keys = append(keys, s.socketKey(owner, r.Socket), s.tokenKey(owner, r.Token))
	row := r.Identity + "\x00" + r.Node + "\x00" + string(r.Data)
	args = append(args, r.Socket, r.Sub, r.Token, r.Identity, row,
		millis(s.cfg.TTL), s.keepMillis(), millis(s.cfg.GenerationTTL), strconv.Itoa(s.cfg.MaxPerIdentity))
	n, err := s.add.Exec(ctx, s.c.rc, keys, args).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("interest add %s/%s: %w", owner, r.Sub, err)
	}
	switch n {
	case -1:
		return 0, interest.DuplicateError(r.Sub)
	case -2:
		return 0, interest.LimitError(s.cfg.MaxPerIdentity)
	}
	return uint64(n), nil
}

// Remove drops socket's sub.
func (s *Interest) Remove(ctx context.Context, owner, socket, sub string) (uint64, error) {
	for _, f := range [...]struct{ what, v string }{{"owner", owner}, {"socket", socket}, {"sub", sub}} {
		if err := interest.CheckName(f.what, f.v); err != nil {
			return 0, err
		}
	}
	keys, args := s.ownerKeys(owner)
	keys = append(keys, s.socketKey(owner, socket))
	args = append(args, socket, sub, millis(s.cfg.GenerationTTL))
	n, err := s.remove.Exec(ctx, s.c.rc, keys, args).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("interest remove %s/%s: %w", owner, sub, err)
	}
	if n == -1 {
		return 0, interest.NotFoundError(sub)
	}
	return uint64(n), nil
}

// Reap drops everything socket holds under owner.
func (s *Interest) Reap(ctx context.Context, owner, socket string) (uint64, error) {
	if err := interest.CheckOwnerSocket(owner, socket); err != nil {
		return 0, err
	}
	keys, args := s.ownerKeys(owner)
	keys = append(keys, s.socketKey(owner, socket))
	args = append(args, socket, millis(s.cfg.GenerationTTL))
	n, err := s.reap.Exec(ctx, s.c.rc, keys, args).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("interest reap %s/%s: %w", owner, socket, err)
	}
	return uint64(n), nil
}

// Refresh renews socket's deadline.
func (s *Interest) Refresh(ctx context.Context, owner, socket string) (int, error) {
	if err := interest.CheckOwnerSocket(owner, socket); err != nil {
		return 0, err
	}
	keys, args := s.ownerKeys(owner)
	keys = append(keys, s.socketKey(owner, socket))
	args = append(args, socket, millis(s.cfg.TTL), s.keepMillis(), millis(s.cfg.GenerationTTL))
	n, err := s.refresh.Exec(ctx, s.c.rc, keys, args).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("interest refresh %s/%s: %w", owner, socket, err)
	}
	return int(n), nil
}

// Watched reports which tokens anyone watches: one SMISMEMBER.
func (s *Interest) Watched(ctx context.Context, owner string, tokens []string) ([]bool, error) {
	if err := interest.CheckName("owner", owner); err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return []bool{}, nil
	}
	cmd := s.c.rc.B().Smismember().Key(s.c.key("w", ownerTag(owner))).Member(tokens...).Build()
	flags, err := s.c.rc.Do(ctx, cmd).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("interest watched %s: %w", owner, err)
	}
	if len(flags) != len(tokens) {
		return nil, fmt.Errorf("interest watched %s: %d answers for %d tokens", owner, len(flags), len(tokens))
	}
	out := make([]bool, len(tokens))
	for i, f := range flags {
		out[i] = f == 1
	}
	return out, nil
}

// Rows returns the live rows under tokens.
func (s *Interest) Rows(ctx context.Context, owner string, tokens []string) ([]interest.Row, error) {
	if err := interest.CheckName("owner", owner); err != nil {
		return nil, err
	}
	keys, args := s.ownerKeys(owner)
	seen := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		if err := interest.CheckToken(t); err != nil {
			return nil, err
		}
		if !seen[t] {
			seen[t] = true
			args = append(args, t)
		}
	}
	if len(seen) == 0 {
		return nil, nil
	}
	flat, err := s.rows.Exec(ctx, s.c.rc, keys, args).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("interest rows %s: %w", owner, err)
	}
	if len(flat)%3 != 0 {
		return nil, fmt.Errorf("interest rows %s: %d strings, want triples", owner, len(flat))
	}
	out := make([]interest.Row, 0, len(flat)/3)
	for i := 0; i < len(flat); i += 3 {
		r, err := decodeRow(flat[i], flat[i+1], flat[i+2])
		if err != nil {
			return nil, fmt.Errorf("interest rows %s: %w", owner, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeRow reads a row from its token, its field (<socket>\0<sub>) and its value
// (<identity>\0<node>\0<data>).
func decodeRow(token, field, value string) (interest.Row, error) {
	socket, sub, ok := strings.Cut(field, "\x00")
	if !ok {
		return interest.Row{}, errors.New("row field without a NUL")
	}
	identity, rest, ok1 := strings.Cut(value, "\x00")
	node, data, ok2 := strings.Cut(rest, "\x00")
	if !ok1 || !ok2 {
		return interest.Row{}, errors.New("row value without two NULs")
	}
	return interest.Row{Token: token, Socket: socket, Sub: sub, Identity: identity, Node: node, Data: []byte(data)}, nil
}

// Generation returns owner's generation.
func (s *Interest) Generation(ctx context.Context, owner string) (uint64, error) {
	if err := interest.CheckName("owner", owner); err != nil {
		return 0, err
	}
	v, err := s.c.rc.Do(ctx, s.c.rc.B().Get().Key(s.c.key("g", ownerTag(owner))).Build()).AsUint64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("interest generation %s: %w", owner, err)
	}
	return v, nil
}

// Probe returns owner's generation and which of tokens are watched: one script.
func (s *Interest) Probe(ctx context.Context, owner string, tokens []string) (uint64, []bool, error) {
	return s.doProbe(ctx, owner, "0", 0, tokens)
}

// Stamp raises owner's mark, then probes, in the same script.
func (s *Interest) Stamp(ctx context.Context, owner string, mark uint64, tokens []string) (uint64, []bool, error) {
	return s.doProbe(ctx, owner, "1", mark, tokens)
}

func (s *Interest) doProbe(ctx context.Context, owner, stamp string, mark uint64, tokens []string) (uint64, []bool, error) {
	if err := interest.CheckName("owner", owner); err != nil {
		return 0, nil, err
	}
	args := make([]string, 0, 3+len(tokens))
	args = append(args, stamp, fmt.Sprintf("%016x", mark), millis(s.cfg.GenerationTTL))
	for _, t := range tokens {
		if err := interest.CheckToken(t); err != nil {
			return 0, nil, err
		}
		args = append(args, t)
	}
	tag := ownerTag(owner)
	keys := []string{s.c.key("g", tag), s.c.key("m", tag), s.c.key("w", tag)}
	v, err := s.probe.Exec(ctx, s.c.rc, keys, args).AsIntSlice()
	if err != nil {
		return 0, nil, fmt.Errorf("interest probe %s: %w", owner, err)
	}
	if len(v) != 1+len(tokens) {
		return 0, nil, fmt.Errorf("interest probe %s: %d answers for %d tokens", owner, len(v)-1, len(tokens))
	}
	watched := make([]bool, len(tokens))
	for i := range tokens {
		watched[i] = v[1+i] == 1
	}
	return uint64(v[0]), watched, nil
}

// Mark returns owner's mark.
func (s *Interest) Mark(ctx context.Context, owner string) (uint64, error) {
	if err := interest.CheckName("owner", owner); err != nil {
		return 0, err
	}
	v, err := s.c.rc.Do(ctx, s.c.rc.B().Get().Key(s.c.key("m", ownerTag(owner))).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("interest mark %s: %w", owner, err)
	}
	m, err := strconv.ParseUint(v, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("interest mark %s: stored %q is not a mark", owner, v)
	}
	return m, nil
}

// Sockets returns owner's live sockets: one ZRANGE over the deadlines, from the server's now.
func (s *Interest) Sockets(ctx context.Context, owner string) ([]string, error) {
	if err := interest.CheckName("owner", owner); err != nil {
		return nil, err
	}
	v, err := s.sockets.Exec(ctx, s.c.rc, []string{s.c.key("l", ownerTag(owner))}, nil).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("interest sockets %s: %w", owner, err)
	}
	return v, nil
}
