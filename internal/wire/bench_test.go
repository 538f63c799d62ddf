package wire

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// benchChange returns an insert with cols columns of mixed kinds.
func benchChange(cols int) *Change {
	row := make(change.Row, cols)
	for i := range row {
		var v string
		switch i % 3 {
		case 0:
			v = strconv.Itoa(i * 1000)
		case 1:
			v = `"a text value of moderate length, ` + strconv.Itoa(i) + `"`
		default:
			v = `{"k":[1,2,3],"flag":true}`
		}
		row[i] = change.Column{Name: "column_" + strconv.Itoa(i), Value: []byte(v)}
	}
	return &Change{LSN: 0x16B374D848, Idx: 1, Op: OpInsert, Table: "public.items", Row: row,
		CommitTime: commitTime, TxID: 123456, WriteTag: "tag"}
}

// BenchmarkDataFrame measures one subscriber's frame: its head plus the shared body. The
// body is encoded once per change in production; "body" measures that, "head" the
// per-subscriber part.
func BenchmarkDataFrame(b *testing.B) {
	for _, cols := range []int{1, 10, 100} {
		c := benchChange(cols)
		b.Run(fmt.Sprintf("cols=%d/head+body", cols), func(b *testing.B) {
			buf := make([]byte, 0, 64<<10)
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendDataHead(buf[:0], FrameChange, "subscription-1")
				buf = AppendChangeBody(buf, c)
			}
			b.SetBytes(int64(len(buf)))
		})
		b.Run(fmt.Sprintf("cols=%d/body", cols), func(b *testing.B) {
			buf := make([]byte, 0, 64<<10)
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendChangeBody(buf[:0], c)
			}
			b.SetBytes(int64(len(buf)))
		})
	}
	b.Run("head", func(b *testing.B) {
		buf := make([]byte, 0, 128)
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendDataHead(buf[:0], FrameChange, "subscription-1")
		}
	})
	b.Run("message/head+body", func(b *testing.B) {
		m := &Message{Pos: ChannelPosition("k7Hq2x", 42), Channel: "rooms/1", Event: "chat", Data: []byte(`{"text":"hello there","n":1}`)}
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendDataHead(buf[:0], FrameMessage, "subscription-1")
			buf = AppendMessageBody(buf, m)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	data := make([]byte, 0, 1024)
	data = append(data, `{"text":"`...)
	for len(data) < 1000 {
		data = append(data, "lorem ipsum "...)
	}
	data = append(data, `"}`...)
	frames := []struct{ name, in string }{
		{"ping", `{"type":"ping","id":"42"}`},
		{"ack", `{"type":"ack","id":"42","sub":"jobs","pos":"16/B374D848.3"}`},
		{"subscribe", `{"type":"subscribe","id":"2","sub":"items","table":"public.items","filter":{"and":[{"eq":["owner","u1"]},{"gt":["n",3]}]},"columns":["id","title"],"from":"16/B374D848.3"}`},
		{"publish/1KB", `{"type":"publish","id":"5","channel":"rooms/1","event":"chat","data":` + string(data) + `}`},
	}
	for _, f := range frames {
		in := []byte(f.in)
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := Decode(in, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
