package wire

import (
	"errors"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEventID(t *testing.T) {
	for _, tt := range []struct {
		sub  string
		p    Position
		want string
	}{
		{"feed", TablePosition(0x16B374D848, 3), "feed 16/B374D848.3"},
		{"feed", TablePosition(0x16B374D848, 0), "feed 16/B374D848"},
		{"c:1", ChannelPosition("k7Hq2x", 42), "c:1 k7Hq2x:42"},
	} {
		got := string(AppendEventID(nil, tt.sub, tt.p))
		if got != tt.want {
			t.Errorf("AppendEventID = %q, want %q", got, tt.want)
		}
		id, err := ParseEventID(got)
		if err != nil || id.Session != "" || len(id.Subs) != 1 || id.Subs[0].Sub != tt.sub || id.Subs[0].Pos != tt.p {
			t.Errorf("ParseEventID(%q) = %+v %v", got, id, err)
		}
	}
	long, err := ParseEventID("@n1.Xy_-z feed 16/B374D848.3 c:1 k7Hq2x:42")
	want := EventID{Session: "n1.Xy_-z", Subs: []SubPosition{{"feed", TablePosition(0x16B374D848, 3)}, {"c:1", ChannelPosition("k7Hq2x", 42)}}}
	if err != nil || !cmp.Equal(long, want) {
		t.Errorf("ParseEventID(long form) = %+v, %v; want %+v", long, err, want)
	}
	if id, err := ParseEventID("@n1.Xy"); err != nil || id.Session != "n1.Xy" || len(id.Subs) != 0 {
		t.Errorf("ParseEventID(session alone) = %+v, %v", id, err)
	}
	for _, bad := range []string{"", "feed", "feed ", " 1/2", "feed 1/2 x", "feed xyz", "a\tb 1/2",
		"@s feed 1/2 feed 1/3", "@s feed 1/2 inbox", "@s  feed 1/2", "@s feed 1/2 x\ty 1/2", "s feed 1/2 inbox 1/3", "@ feed 1/2"} {
		if _, err := ParseEventID(bad); CodeOf(err) != CodeBadFrame {
			t.Errorf("ParseEventID(%q) = %v, want bad_frame", bad, err)
		}
	}
}

func TestSubscribeFromQuery(t *testing.T) {
	tests := []struct {
		name  string
		query string
		last  string
		want  *Subscribe
		code  Code
		field string
	}{
		{name: "no subscription", query: "access_token=x"},
		{name: "table", query: "sub=feed&table=public.items&filter=%7B%22eq%22%3A+%5B%22id%22%2C1%5D%7D&columns=id,title&from=16/B374D848.2",
			want: &Subscribe{Sub: "feed", Table: "public.items", Filter: raw(`{"eq":["id",1]}`), Columns: []string{"id", "title"},
				From: TablePosition(0x16B374D848, 2), Mode: ModeBroadcast}},
		{name: "channel", query: "sub=c&channel=rooms/1&event=chat&from=k7:3",
			want: &Subscribe{Sub: "c", Channel: "rooms/1", Event: "chat", From: ChannelPosition("k7", 3), Mode: ModeBroadcast}},
		{name: "Last-Event-ID wins over from", query: "sub=feed&table=a.b&from=1/1", last: "feed 2/0.7",
			want: &Subscribe{Sub: "feed", Table: "a.b", From: TablePosition(2<<32, 7), Mode: ModeBroadcast}},
		{name: "Last-Event-ID on a durable subscription is not a from", query: "sub=j&channel=jobs&mode=single", last: "j e:4",
			want: &Subscribe{Sub: "j", Channel: "jobs", Mode: ModeSingle, Durable: true}},
		{name: "Last-Event-ID of another subscription", query: "sub=feed&table=a.b", last: "other 2/0",
			code: CodeBadPosition, field: "Last-Event-ID"},
		{name: "long Last-Event-ID", query: "sub=feed&table=a.b&from=1/1", last: "@n1.x inbox k7:3 feed 2/0.7",
			want: &Subscribe{Sub: "feed", Table: "a.b", From: TablePosition(2<<32, 7), Mode: ModeBroadcast}},
		{name: "long Last-Event-ID without the URL's subscription", query: "sub=feed&table=a.b", last: "@n1.x inbox k7:3",
			code: CodeBadPosition, field: "Last-Event-ID"},
		// The stream's kept subscriptions take up a long id; the URL need not declare one.
		{name: "long Last-Event-ID without a URL subscription", query: "access_token=x", last: "@n1.x inbox k7:3"},
		{name: "Last-Event-ID of the wrong kind", query: "sub=feed&table=a.b", last: "feed e:1",
			code: CodeBadPosition, field: "from"},
		{name: "Last-Event-ID garbled", query: "sub=feed&table=a.b", last: "feed",
			code: CodeBadFrame, field: "Last-Event-ID"},
		// Without a URL subscription there is nothing to resume: the id was meant for another
		// stream, and ignoring it would lose items silently.
		{name: "Last-Event-ID without a subscription", query: "access_token=x", last: "feed 2/0.7",
			code: CodeBadPosition, field: "Last-Event-ID"},
		{name: "Last-Event-ID garbled without a subscription", query: "access_token=x", last: "garbage",
			code: CodeBadFrame, field: "Last-Event-ID"},
		{name: "sub missing", query: "table=a.b", code: CodeBadFrame, field: "sub"},
		{name: "sub alone", query: "sub=feed", code: CodeBadFrame, field: "table"},
		{name: "parameter twice", query: "sub=feed&table=a.b&table=c.d", code: CodeBadFrame, field: "table"},
		{name: "filter not JSON", query: "sub=feed&table=a.b&filter=id%3D1", code: CodeBadFrame, field: "filter"},
		{name: "filter on a channel", query: "sub=feed&channel=c&filter=%7B%7D", code: CodeBadFrame, field: "filter"},
		{name: "empty column", query: "sub=feed&table=a.b&columns=id,,x", code: CodeBadFrame, field: "columns"},
		{name: "from garbled", query: "sub=feed&table=a.b&from=yesterday", code: CodeBadFrame, field: "from"},
		{name: "both table and channel", query: "sub=feed&table=a.b&channel=c", code: CodeBadFrame, field: "channel"},
		{name: "mode single", query: "sub=j&channel=jobs&mode=single",
			want: &Subscribe{Sub: "j", Channel: "jobs", Mode: ModeSingle, Durable: true}},
		{name: "durable broadcast", query: "sub=j&channel=jobs&durable=true",
			want: &Subscribe{Sub: "j", Channel: "jobs", Mode: ModeBroadcast, Durable: true}},
		{name: "durable garbled", query: "sub=j&channel=jobs&durable=yes", code: CodeBadFrame, field: "durable"},
		{name: "mode unknown", query: "sub=j&channel=jobs&mode=x", code: CodeBadFrame, field: "mode"},
		{name: "snapshot", query: "sub=feed&table=a.b&snapshot=1",
			want: &Subscribe{Sub: "feed", Table: "a.b", Mode: ModeBroadcast, Snapshot: true}},
		{name: "snapshot off", query: "sub=feed&table=a.b&snapshot=false",
			want: &Subscribe{Sub: "feed", Table: "a.b", Mode: ModeBroadcast}},
		// The stream went live before it dropped: the client holds the view, and resumes.
		{name: "snapshot resumed by Last-Event-ID", query: "sub=feed&table=a.b&snapshot=1", last: "feed 2/0",
			want: &Subscribe{Sub: "feed", Table: "a.b", From: TablePosition(2<<32, 0), Mode: ModeBroadcast}},
		// It dropped before its live: no position, and the rows are read again.
		{name: "snapshot taken up before its live", query: "sub=feed&table=a.b&snapshot=1", last: "feed -",
			want: &Subscribe{Sub: "feed", Table: "a.b", Mode: ModeBroadcast, Snapshot: true}},
		{name: "snapshot garbled", query: "sub=feed&table=a.b&snapshot=yes", code: CodeBadFrame, field: "snapshot"},
		{name: "snapshot with from", query: "sub=feed&table=a.b&snapshot=1&from=1/1", code: CodeBadFrame, field: "snapshot"},
		{name: "snapshot on a channel", query: "sub=feed&channel=c&snapshot=1", code: CodeBadFrame, field: "snapshot"},
		{name: "not UTF-8", query: "sub=j&channel=%FF", code: CodeBadFrame, field: "channel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseQuery(q, tt.last)
			if tt.code != "" {
				var e *Error
				if !errors.As(err, &e) || e.Code != tt.code || e.Field != tt.field {
					t.Fatalf("SubscribeFromQuery(%s) = %+v, %v; want %s on %s", tt.query, got, err, tt.code, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SubscribeFromQuery(%s) (-want +got):\n%s", tt.query, diff)
			}
		})
	}
}
