package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// redisProbe reads a Redis server's counters with INFO, over a connection of its own. It
// speaks RESP itself, through a plain socket, rather than through a client library: it must
// know the exact size of each of its requests and replies, to take them out of the server's
// byte counters, and only internal/store/redis imports the Redis client.
type redisProbe struct {
	conn net.Conn
	r    *bufio.Reader
}

// infoRequest asks for the three sections a sample reads, in one command (Redis 7 takes
// several sections).
var infoRequest = respCommand("INFO", "stats", "commandstats", "cpu")

// dialRedisProbe connects to the Redis at raw, redis://[user:password@]host:port[/db]. TLS
// (rediss://) and Redis Cluster seeds (addr parameters) are refused: a sample reads one server.
func dialRedisProbe(ctx context.Context, raw string) (*redisProbe, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bench: redis URL: %w", err)
	}
	if u.Scheme != "redis" {
		return nil, fmt.Errorf("bench: redis URL %s: want redis://host:port; TLS is not supported for reading its counters", u.Redacted())
	}
	if u.Query().Has("addr") {
		return nil, fmt.Errorf("bench: redis URL %s names a Redis Cluster: its counters are per server; give one server's URL", u.Redacted())
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to Redis at %s to read its counters: %w", host, err)
	}
	p := &redisProbe{conn: conn, r: bufio.NewReader(conn)}
	if pw, ok := u.User.Password(); ok {
		args := []string{"AUTH", pw}
		if name := u.User.Username(); name != "" && name != "default" {
			args = []string{"AUTH", name, pw}
		}
		if _, err := p.do(respCommand(args...)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("bench: authenticate to Redis at %s: %w", host, err)
		}
	}
	return p, nil
}

func (p *redisProbe) close() { _ = p.conn.Close() }

// redisSample is a Redis server's counters at one moment, and the size of the request and
// reply that read them.
type redisSample struct {
	at        time.Time
	calls     map[string]int64 // INFO commandstats: calls by command ("config|get" for a subcommand)
	netIn     int64            // total_net_input_bytes
	netOut    int64            // total_net_output_bytes
	cpu       float64          // used_cpu_user + used_cpu_sys, in seconds
	request   int              // bytes of the INFO request: counted in the next sample's netIn
	replySize int              // bytes of its reply: counted in the next sample's netOut
}

// sample runs INFO and reads the counters from its reply.
func (p *redisProbe) sample() (redisSample, error) {
	at := time.Now()
	reply, err := p.do(infoRequest)
	if err != nil {
		return redisSample{}, fmt.Errorf("bench: read Redis's counters: %w", err)
	}
	s, err := parseInfo(string(reply.body))
	s.at, s.request, s.replySize = at, len(infoRequest), reply.size
	return s, err
}

// respReply is a reply's payload (a bulk string, or a simple string's text) and its size on
// the wire.
type respReply struct {
	body []byte
	size int
}

// do sends one command and reads its reply: a simple string, or a bulk or verbatim string.
func (p *redisProbe) do(req []byte) (respReply, error) {
	_ = p.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.conn.Write(req); err != nil {
		return respReply{}, err
	}
	line, err := p.r.ReadString('\n')
	if err != nil {
		return respReply{}, err
	}
	size := len(line)
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return respReply{}, errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return respReply{body: []byte(line[1:]), size: size}, nil
	case '-':
		return respReply{}, fmt.Errorf("redis: %s", line[1:])
	case '$', '=':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return respReply{}, fmt.Errorf("reply %q: want a string", line)
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(p.r, body); err != nil {
			return respReply{}, err
		}
		size += len(body)
		body = body[:n]
		if line[0] == '=' && len(body) >= 4 { // a verbatim string: "txt:" before the text
			body = body[4:]
		}
		return respReply{body: body, size: size}, nil
	}
	return respReply{}, fmt.Errorf("reply %q: want a string", line)
}

// respCommand encodes a command as a RESP array of bulk strings.
func respCommand(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// parseInfo reads the counters a sample needs from INFO's text: "name:value" lines, and
// "cmdstat_<command>:calls=N,usec=..." lines.
func parseInfo(text string) (redisSample, error) {
	s := redisSample{calls: map[string]int64{}}
	var seen int
	var user, sys float64
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if !ok {
			continue
		}
		var err error
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			calls, _, _ := strings.Cut(value, ",")
			n, ok := strings.CutPrefix(calls, "calls=")
			if !ok {
				return s, fmt.Errorf("bench: INFO commandstats line %q: no calls", line)
			}
			s.calls[strings.TrimPrefix(name, "cmdstat_")], err = strconv.ParseInt(n, 10, 64)
		case name == "total_net_input_bytes":
			s.netIn, err = strconv.ParseInt(value, 10, 64)
			seen++
		case name == "total_net_output_bytes":
			s.netOut, err = strconv.ParseInt(value, 10, 64)
			seen++
		case name == "used_cpu_user":
			user, err = strconv.ParseFloat(value, 64)
			seen++
		case name == "used_cpu_sys":
			sys, err = strconv.ParseFloat(value, 64)
			seen++
		}
		if err != nil {
			return s, fmt.Errorf("bench: INFO line %q: %w", line, err)
		}
	}
	if seen != 4 {
		return s, errors.New("bench: INFO lacks total_net_input_bytes, total_net_output_bytes, used_cpu_user or used_cpu_sys (Redis 7 or later answers INFO stats commandstats cpu)")
	}
	s.cpu = user + sys
	return s, nil
}

// RedisWindow is what a Redis server did between two samples, without the samples' own INFO
// commands and bytes.
type RedisWindow struct {
	Seconds float64 `json:"seconds"`
	// Commands counts every command Redis ran, those a script ran included: INFO
	// commandstats counts a command a Lua script calls as that command, besides the script's
	// EVALSHA.
	Commands int64 `json:"commands"`
	// Scripts counts the script calls (EVALSHA, EVAL, FCALL and their read-only forms), each one
	// command from a client, whatever it runs.
	Scripts   int64            `json:"scripts"`
	ByCommand map[string]int64 `json:"by_command"`
	// InputBytes and OutputBytes are what Redis read from its clients and wrote to them:
	// total_net_input_bytes and total_net_output_bytes.
	InputBytes  int64   `json:"net_input_bytes"`
	OutputBytes int64   `json:"net_output_bytes"`
	CPUSeconds  float64 `json:"cpu_seconds"` // used_cpu_user + used_cpu_sys
}

// scriptCommands are the commands that run a script: one client command each.
var scriptCommands = map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "fcall": true, "fcall_ro": true}

// window is what happened between samples a and b. b's INFO request and a's reply are in b's
// byte counters, and a's INFO call in its commandstats: they are taken out.
func window(a, b redisSample) RedisWindow {
	w := RedisWindow{
		Seconds:     b.at.Sub(a.at).Seconds(),
		ByCommand:   map[string]int64{},
		InputBytes:  b.netIn - a.netIn - int64(b.request),
		OutputBytes: b.netOut - a.netOut - int64(a.replySize),
		CPUSeconds:  b.cpu - a.cpu,
	}
	for cmd, n := range b.calls {
		d := n - a.calls[cmd]
		if cmd == "info" {
			d--
		}
		if d <= 0 {
			continue
		}
		w.ByCommand[cmd] = d
		w.Commands += d
		if scriptCommands[cmd] {
			w.Scripts += d
		}
	}
	return w
}

// RedisReport is what the Redis the nodes share did over a run, and per event.
type RedisReport struct {
	// Run is from just before the first event to the end of the run (the window of the
	// server's CPU time).
	Run RedisWindow `json:"run"`
	// Idle is a quiet window with every subscriber connected, before the first event: what
	// the nodes do with nothing flowing (pings, renewals, blocked reads). Its rate, over the
	// run's seconds, is taken off the per-event figures below.
	Idle RedisWindow `json:"idle"`

	// Per event sent (a publication, or a committed row), with the idle rate taken off.
	CommandsPerEvent    float64            `json:"commands_per_event"`
	ScriptsPerEvent     float64            `json:"scripts_per_event"`
	InputBytesPerEvent  float64            `json:"net_input_bytes_per_event"`
	OutputBytesPerEvent float64            `json:"net_output_bytes_per_event"`
	ByCommandPerEvent   map[string]float64 `json:"by_command_per_event"`
	// CPUMicrosPerDelivery is Redis's CPU time over the run (idle rate not taken off, like
	// the nodes' figure) divided by the deliveries received, in µs.
	CPUMicrosPerDelivery float64 `json:"cpu_us_per_delivery"`
}

// newRedisReport computes the per-event figures from the idle and run windows.
func newRedisReport(idle, run RedisWindow, events, deliveries int64) *RedisReport {
	r := &RedisReport{Run: run, Idle: idle, ByCommandPerEvent: map[string]float64{}}
	if events <= 0 {
		return r
	}
	scale := 0.0 // the idle window's counts, scaled to the run's length
	if idle.Seconds > 0 {
		scale = run.Seconds / idle.Seconds
	}
	per := func(run, idle int64) float64 { return (float64(run) - scale*float64(idle)) / float64(events) }
	r.CommandsPerEvent = per(run.Commands, idle.Commands)
	r.ScriptsPerEvent = per(run.Scripts, idle.Scripts)
	r.InputBytesPerEvent = per(run.InputBytes, idle.InputBytes)
	r.OutputBytesPerEvent = per(run.OutputBytes, idle.OutputBytes)
	for cmd, n := range run.ByCommand {
		r.ByCommandPerEvent[cmd] = per(n, idle.ByCommand[cmd])
	}
	if deliveries > 0 {
		r.CPUMicrosPerDelivery = 1e6 * run.CPUSeconds / float64(deliveries)
	}
	return r
}

// topCommands are the commands of m, most first, as "name n" with n formatted by f: at most k.
func topCommands(m map[string]float64, k int, f func(float64) string) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for c, v := range m {
		all = append(all, kv{c, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var out []string
	for i, e := range all {
		if i == k {
			break
		}
		out = append(out, e.k+" "+f(e.v))
	}
	return strings.Join(out, ", ")
}
