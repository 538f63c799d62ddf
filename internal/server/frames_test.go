package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestJSONColumnWithLineBreaksIsOneSSELine: a json column stores its text verbatim, line breaks
// between tokens and around the value included. Each change must still reach an SSE client as
// one data line that parses, with the value intact.
func TestJSONColumnWithLineBreaksIsOneSSELine(t *testing.T) {
	r, url := startWithDB(t, `CREATE TABLE items (id int PRIMARY KEY, doc json)`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url+"/v1/sse?sub=feed&table=public.items", nil)
	req.Header = bearerHeader(t, "user-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		// Split on LF, CR and CRLF alike, as an EventSource does.
		sc := bufio.NewScanner(resp.Body)
		sc.Split(sseLines)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// next returns the next data line's frame; any line that is not an SSE field fails.
	next := func() map[string]any {
		t.Helper()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatal("stream ended")
				}
				switch {
				case line == "" || strings.HasPrefix(line, "id: ") || strings.HasPrefix(line, "retry: ") || strings.HasPrefix(line, ":"):
					continue
				case !strings.HasPrefix(line, "data: "):
					t.Fatalf("line %q is not an SSE field: a frame was split across lines", line)
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(line[len("data: "):]), &m); err != nil {
					t.Fatalf("data line %q is not a whole frame: %v", line, err)
				}
				return m
			case <-time.After(20 * time.Second):
				t.Fatal("no event within 20s")
			}
		}
	}
	for _, typ := range []string{"welcome", "subscribed"} {
		if m := next(); m["type"] != typ {
			t.Fatalf("got %v, want %s", m, typ)
		}
	}
	docs := []struct{ sql, want string }{
		{`E'{"a":\r\n1,\r\n"b": [1,\n2]}'`, `{"a":1,"b":[1,2]}`},
		{`E'"x y"\r\n'`, `"x y"`},
		{`E'1\r\n'`, `1`},
		{`E'true\n'`, `true`},
		{`E'\r\n[\r\n]\r\n'`, `[]`},
		{`E'{"s":"line\\nbreak"}'`, `{"s":"line\nbreak"}`},
	}
	for i, d := range docs {
		testenv.Exec(t, url, `INSERT INTO items VALUES (`+string(rune('1'+i))+`, `+d.sql+`)`)
	}
	for _, d := range docs {
		m := next()
		row, _ := m["row"].(map[string]any)
		if m["type"] != "change" || row == nil {
			t.Fatalf("got %v, want a change", m)
		}
		got, _ := json.Marshal(row["doc"])
		var want any
		_ = json.Unmarshal([]byte(d.want), &want)
		if diff := cmp.Diff(want, row["doc"]); diff != "" {
			t.Errorf("doc %s arrived as %s (-want +got):\n%s", d.sql, got, diff)
		}
	}
}

// sseLines splits a stream into lines the way the SSE format defines them: ended by CRLF, LF
// or CR.
func sseLines(data []byte, atEOF bool) (int, []byte, error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 == len(data) && !atEOF {
				return 0, nil, nil // a CRLF may be split across reads
			}
			if i+1 < len(data) && data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
