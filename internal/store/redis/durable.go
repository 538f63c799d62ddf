package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/stream"
)

// Durable is durable.Store on Redis, shared by every node: each subscription's queue, leases
// and bound connections in keys of its holder's slot, each step one script that follows
// durable.Queue's rules (durableScript). Deadlines are the callers' clocks (durable.Store
// passes now), so the nodes' clocks must agree to well within durable.lease; the owner's claim
// and the keys' TTLs are Redis's. See the package documentation for its keys.
type Durable struct {
	c      *Client // read-only
	lim    durable.Limits
	script *rueidis.Lua
}

var _ durable.Store = (*Durable)(nil)

// NewDurable returns the durable store on c, its subscriptions bounded by lim.
func NewDurable(c *Client, lim durable.Limits) *Durable {
	return &Durable{c: c, lim: lim.WithDefaults(), script: rueidis.NewLuaScript(durableScript)}
}

// holderTag is the hash tag of a holder's keys: its subject's length, the subject and the app,
// so no two holders share one.
func holderTag(k durable.Key) string {
	return "{j:" + strconv.Itoa(len(k.Subject)) + ":" + k.Subject + k.App + "}"
}

// keys returns the script's keys for k: the holder's index, then the subscription's.
func (s *Durable) keys(k durable.Key) []string {
	tag := holderTag(k)
	out := []string{s.c.key("jh", tag)}
	for _, kind := range []string{"js", "jc", "jq", "je", "jl", "jp", "jk", "jr", "jo"} {
		out = append(out, s.c.key(kind, tag)+":"+k.Name)
	}
	return out
}

// run runs op on k's keys at now with args after the common ones.
func (s *Durable) run(ctx context.Context, k durable.Key, op string, now time.Time, args ...string) ([]string, error) {
	l := s.lim
	argv := append([]string{op, k.Name, unixMillis(now), strconv.Itoa(l.MaxItems), strconv.Itoa(l.MaxBytes),
		millis(l.Lease), strconv.Itoa(l.MaxAttempts), strconv.Itoa(l.MaxInFlight), millis(l.IdleTTL),
		strconv.Itoa(l.MaxPerHolder), strconv.Itoa(durable.SettledMemory), millis(l.ConnTTL)}, args...)
	flat, err := s.script.Exec(ctx, s.c.rc, s.keys(k), argv).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("durable %s %s: %w", op, k, err)
	}
	if len(flat) == 0 {
		return nil, fmt.Errorf("durable %s %s: an empty answer", op, k)
	}
	if flat[0] == "gone" {
		return nil, durable.ErrGone
	}
	return flat, nil
}

// encodeDef is a Def as the script keeps and compares it.
func encodeDef(d durable.Def) string { return d.Channel + "\n" + d.Event + "\n" + string(d.Mode) }

func decodeDef(v string) durable.Def {
	p := strings.SplitN(v, "\n", 3)
	if len(p) != 3 {
		return durable.Def{}
	}
	return durable.Def{Channel: p[0], Event: p[1], Mode: durable.Mode(p[2])}
}

// encodeEntry is an entry as the script keeps it: m\n<pos>\n<size>\n<channel>\n<event>\n<data>
// or g\n<first>\n<last>\n<lost>\n<reason>.
func encodeEntry(e durable.Entry) string {
	if m := e.Msg; m != nil {
		return "m\n" + m.Pos.String() + "\n" + strconv.Itoa(e.Size()) + "\n" + m.Channel + "\n" + m.Event + "\n" + string(m.Data)
	}
	g := e.Gap
	return "g\n" + g.First.String() + "\n" + g.Last.String() + "\n" + strconv.FormatUint(g.Lost, 10) + "\n" + string(g.Reason)
}

func decodeEntry(v string) (durable.Entry, error) {
	if strings.HasPrefix(v, "m\n") {
		p := strings.SplitN(v, "\n", 6)
		if len(p) != 6 {
			return durable.Entry{}, errors.New("a malformed publication")
		}
		pos, err := stream.ParsePosition(p[1])
		if err != nil {
			return durable.Entry{}, err
		}
		return durable.Entry{Msg: &stream.Message{Pos: pos, Channel: p[3], Event: p[4], Data: []byte(p[5])}}, nil
	}
	p := strings.Split(v, "\n")
	if len(p) != 5 || p[0] != "g" {
		return durable.Entry{}, errors.New("a malformed marker")
	}
	var g stream.Gap
	var err error
	if p[1] != "" {
		if g.First, err = stream.ParsePosition(p[1]); err != nil {
			return durable.Entry{}, err
		}
	}
	if g.Last, err = stream.ParsePosition(p[2]); err != nil {
		return durable.Entry{}, err
	}
	if g.Lost, err = strconv.ParseUint(p[3], 10, 64); err != nil {
		return durable.Entry{}, err
	}
	g.Reason = stream.Reason(p[4])
	return durable.Entry{Gap: &g}, nil
}

// answer is a step's answer: the op's value, the start and tail, and the outcome.
type answer struct {
	value       string
	start, tail stream.Position
	out         durable.Outcome
}

func decodeAnswer(flat []string) (answer, error) {
	if len(flat) < 12 {
		return answer{}, fmt.Errorf("%d strings, want at least 12", len(flat))
	}
	var a answer
	a.value = flat[1]
	var err error
	if flat[2] != "" {
		if a.start, err = stream.ParsePosition(flat[2]); err != nil {
			return answer{}, err
		}
	}
	if flat[3] != "" {
		if a.tail, err = stream.ParsePosition(flat[3]); err != nil {
			return answer{}, err
		}
	}
	n := make([]int, 8)
	for i := range n {
		if n[i], err = strconv.Atoi(flat[4+i]); err != nil {
			return answer{}, err
		}
	}
	a.out = durable.Outcome{Delivered: n[0], Acked: n[1], Retried: n[2], Parked: n[3], Dropped: n[4], Depth: n[5], Gone: n[6] == 1}
	at := 12
	for d := 0; d < n[7]; d++ {
		if at+3 > len(flat) {
			return answer{}, errors.New("a delivery cut short")
		}
		c := durable.Conn{ID: flat[at], Node: flat[at+1]}
		count, err := strconv.Atoi(flat[at+2])
		if err != nil || at+3+2*count > len(flat) {
			return answer{}, errors.New("a delivery cut short")
		}
		at += 3
		dl := durable.Delivery{Conn: c, Entries: make([]durable.Entry, 0, count)}
		for i := 0; i < count; i++ {
			e, err := decodeEntry(flat[at])
			if err != nil {
				return answer{}, fmt.Errorf("entry: %w", err)
			}
			if e.Attempt, err = strconv.Atoi(flat[at+1]); err != nil {
				return answer{}, err
			}
			dl.Entries = append(dl.Entries, e)
			at += 2
		}
		a.out.Deliveries = append(a.out.Deliveries, dl)
	}
	return a, nil
}

// step runs op and decodes its answer.
func (s *Durable) step(ctx context.Context, k durable.Key, op string, now time.Time, args ...string) (answer, error) {
	flat, err := s.run(ctx, k, op, now, args...)
	if err != nil {
		return answer{}, err
	}
	a, err := decodeAnswer(flat)
	if err != nil {
		return answer{}, fmt.Errorf("durable %s %s: %w", op, k, err)
	}
	return a, nil
}

// Bind implements durable.Store.
func (s *Durable) Bind(ctx context.Context, k durable.Key, def durable.Def, c durable.Conn, now time.Time) (durable.Bound, error) {
	flat, err := s.run(ctx, k, "bind", now, encodeDef(def), c.ID, c.Node)
	if err != nil {
		return durable.Bound{}, err
	}
	switch flat[0] {
	case "conflict":
		if len(flat) < 2 {
			return durable.Bound{}, durable.ErrConflict
		}
		return durable.Bound{Def: decodeDef(flat[1])}, durable.ErrConflict
	case "toomany":
		return durable.Bound{}, durable.ErrTooMany
	}
	a, err := decodeAnswer(flat)
	if err != nil {
		return durable.Bound{}, fmt.Errorf("durable bind %s: %w", k, err)
	}
	created, d, _ := strings.Cut(a.value, "\n")
	return durable.Bound{Def: decodeDef(d), Created: created == "1", Start: a.start, Tail: a.tail, Outcome: a.out}, nil
}

// Begin implements durable.Store.
func (s *Durable) Begin(ctx context.Context, k durable.Key, start stream.Position) error {
	_, err := s.run(ctx, k, "begin", time.Now(), start.String())
	return err
}

// Unbind implements durable.Store.
func (s *Durable) Unbind(ctx context.Context, k durable.Key, id string, now time.Time) (durable.Outcome, error) {
	a, err := s.step(ctx, k, "unbind", now, id)
	return a.out, err
}

// Append implements durable.Store: one script for the batch.
func (s *Durable) Append(ctx context.Context, k durable.Key, ents []durable.Entry, now time.Time) (durable.Outcome, error) {
	args := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Msg == nil && e.Gap == nil {
			continue
		}
		args = append(args, encodeEntry(e))
	}
	a, err := s.step(ctx, k, "append", now, args...)
	return a.out, err
}

// Ack implements durable.Store.
func (s *Durable) Ack(ctx context.Context, k durable.Key, id string, pos stream.Position, now time.Time) (durable.AckResult, durable.Outcome, error) {
	a, err := s.step(ctx, k, "ack", now, id, pos.String())
	if err != nil {
		return 0, durable.Outcome{}, err
	}
	r := map[string]durable.AckResult{"1": durable.Acked, "2": durable.AlreadyAcked, "3": durable.NotFound}[a.value]
	if r == 0 {
		return 0, durable.Outcome{}, fmt.Errorf("durable ack %s: the answer %q", k, a.value)
	}
	return r, a.out, nil
}

// Expire implements durable.Store.
func (s *Durable) Expire(ctx context.Context, k durable.Key, now time.Time) (durable.Outcome, error) {
	a, err := s.step(ctx, k, "expire", now)
	return a.out, err
}

// Touch implements durable.Store.
func (s *Durable) Touch(ctx context.Context, k durable.Key, ids []string, now time.Time) error {
	_, err := s.run(ctx, k, "touch", now, ids...)
	return err
}

// Claim implements durable.Store: the claim is a key with Redis's own TTL.
func (s *Durable) Claim(ctx context.Context, k durable.Key, node string, now time.Time, ttl time.Duration) (string, stream.Position, error) {
	flat, err := s.run(ctx, k, "claim", now, node, strconv.FormatInt(max(ttl.Milliseconds(), 1), 10))
	if err != nil {
		return "", stream.Position{}, err
	}
	if len(flat) < 3 {
		return "", stream.Position{}, fmt.Errorf("durable claim %s: a short answer", k)
	}
	var from stream.Position
	if flat[2] != "" {
		if from, err = stream.ParsePosition(flat[2]); err != nil {
			return "", stream.Position{}, fmt.Errorf("durable claim %s: %w", k, err)
		}
	}
	return flat[1], from, nil
}

// Forget implements durable.Store.
func (s *Durable) Forget(ctx context.Context, k durable.Key) (bool, error) {
	flat, err := s.run(ctx, k, "forget", time.Now())
	if err != nil {
		return false, err
	}
	return len(flat) > 1 && flat[1] == "1", nil
}
