package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/testenv"
)

const infoText = "# Stats\r\n" +
	"total_connections_received:12\r\n" +
	"total_commands_processed:4000\r\n" +
	"total_net_input_bytes:100000\r\n" +
	"total_net_output_bytes:50000\r\n" +
	"\r\n# Commandstats\r\n" +
	"cmdstat_evalsha:calls=300,usec=900,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_xadd:calls=600,usec=600,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_config|get:calls=2,usec=20,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=5,usec=500,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n" +
	"\r\n# CPU\r\n" +
	"used_cpu_sys:1.250000\r\n" +
	"used_cpu_user:2.500000\r\n" +
	"used_cpu_sys_children:0.000000\r\n"

func TestParseInfo(t *testing.T) {
	s, err := parseInfo(infoText)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"evalsha": 300, "xadd": 600, "config|get": 2, "info": 5}
	if diff := cmp.Diff(want, s.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if s.netIn != 100000 || s.netOut != 50000 || s.cpu != 3.75 {
		t.Errorf("in %d, out %d, cpu %g; want 100000, 50000, 3.75", s.netIn, s.netOut, s.cpu)
	}
	if _, err := parseInfo("# Stats\r\ntotal_net_input_bytes:1\r\n"); err == nil {
		t.Error("INFO without the output bytes and CPU parsed")
	}
	if _, err := parseInfo(infoText + "cmdstat_get:usec=1\r\n"); err == nil {
		t.Error("a commandstats line without calls parsed")
	}
}

// A window takes out what the samples cost Redis themselves: the earlier sample's INFO call
// and reply, and the later one's request.
func TestWindowTakesOutTheSamples(t *testing.T) {
	t0 := time.Now()
	a := redisSample{at: t0, calls: map[string]int64{"info": 5, "evalsha": 300, "get": 7}, netIn: 1000, netOut: 2000, cpu: 1, request: 40, replySize: 900}
	b := redisSample{at: t0.Add(2 * time.Second), calls: map[string]int64{"info": 6, "evalsha": 400, "get": 7, "xadd": 200, "hincrby": 100},
		netIn: 1000 + 40 + 5000, netOut: 2000 + 900 + 3000, cpu: 1.5, request: 40, replySize: 950}
	w := window(a, b)
	want := RedisWindow{Seconds: 2, Commands: 400, Scripts: 100, ByCommand: map[string]int64{"evalsha": 100, "xadd": 200, "hincrby": 100},
		InputBytes: 5000, OutputBytes: 3000, CPUSeconds: 0.5}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Errorf("window (-want +got):\n%s", diff)
	}
}

func TestRedisReportPerEvent(t *testing.T) {
	idle := RedisWindow{Seconds: 2, Commands: 20, ByCommand: map[string]int64{"ping": 4, "xread": 16}, InputBytes: 2000, OutputBytes: 400}
	run := RedisWindow{Seconds: 1, Commands: 1010, Scripts: 100, ByCommand: map[string]int64{"evalsha": 100, "xadd": 200, "ping": 2, "xread": 708},
		InputBytes: 101000, OutputBytes: 20200, CPUSeconds: 0.05}
	r := newRedisReport(idle, run, 100, 10000)
	// Half the idle window's counts are taken off: the run was half as long.
	close := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if !close(r.CommandsPerEvent, 10) || !close(r.ScriptsPerEvent, 1) || !close(r.InputBytesPerEvent, 1000) || !close(r.OutputBytesPerEvent, 200) {
		t.Errorf("per event: %g commands, %g scripts, %g B in, %g B out; want 10, 1, 1000, 200",
			r.CommandsPerEvent, r.ScriptsPerEvent, r.InputBytesPerEvent, r.OutputBytesPerEvent)
	}
	if !close(r.ByCommandPerEvent["xread"], 7) || !close(r.ByCommandPerEvent["ping"], 0) || !close(r.ByCommandPerEvent["xadd"], 2) {
		t.Errorf("by command per event %v; want xread 7, ping 0, xadd 2", r.ByCommandPerEvent)
	}
	if !close(r.CPUMicrosPerDelivery, 5) {
		t.Errorf("cpu per delivery %g µs, want 5", r.CPUMicrosPerDelivery)
	}
	if got := topCommands(r.ByCommandPerEvent, 2, func(v float64) string { return fmt.Sprintf("%.0f", v) }); got != "xread 7, xadd 2" {
		t.Errorf("top commands %q, want xread 7, xadd 2", got)
	}
}

func TestRespCommand(t *testing.T) {
	if got, want := string(respCommand("INFO", "stats")), "*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n"; got != want {
		t.Errorf("respCommand = %q, want %q", got, want)
	}
}

// The probe counts each reply's bytes as they were on the wire, a bulk string's header and
// trailer included.
func TestProbeCountsReplyBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reply := "$" + strconv.Itoa(len(infoText)) + "\r\n" + infoText + "\r\n"
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		buf := make([]byte, len(infoRequest))
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		_, _ = c.Write([]byte(reply))
	}()
	p, err := dialRedisProbe(context.Background(), "redis://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	s, err := p.sample()
	if err != nil {
		t.Fatal(err)
	}
	if s.replySize != len(reply) || s.request != len(infoRequest) || s.netIn != 100000 {
		t.Errorf("reply %d B, request %d B, in %d; want %d, %d, 100000", s.replySize, s.request, s.netIn, len(reply), len(infoRequest))
	}
}

func TestDialRedisProbeRefuses(t *testing.T) {
	for _, u := range []string{"rediss://127.0.0.1:1", "redis://127.0.0.1:1?addr=127.0.0.1:2", "http://127.0.0.1:1"} {
		if _, err := dialRedisProbe(context.Background(), u); err == nil {
			t.Errorf("dialRedisProbe(%s) succeeded", u)
		}
	}
}

// Against a real Redis: two samples in a row cost nothing between them but themselves, which
// window takes out. The Redis may be shared with other tests, so only what cannot be theirs
// is checked: the window holds no INFO call of this probe, and its bytes are not negative.
func TestProbeAgainstRedis(t *testing.T) {
	p, err := dialRedisProbe(context.Background(), testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	a, err := p.sample()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.sample()
	if err != nil {
		t.Fatal(err)
	}
	w := window(a, b)
	if w.InputBytes < 0 || w.OutputBytes < 0 || a.replySize < 500 {
		t.Errorf("window %+v, first reply %d B: want no negative bytes and a reply of the three sections", w, a.replySize)
	}
}
