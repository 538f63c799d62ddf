package snapshot

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/handoff"
)

func TestQuoteIdent(t *testing.T) {
	tests := []struct{ in, want string }{
		{"id", `"id"`},
		{"Mixed Case", `"Mixed Case"`},
		{`we"ird`, `"we""ird"`},
		{`""`, `""""""`},
		{"ünï", `"ünï"`},
		{"a\x00b", `"ab"`},
		{"", `""`},
		{`x"; DROP TABLE t; --`, `"x""; DROP TABLE t; --"`},
	}
	for _, tc := range tests {
		if got := quoteIdent(tc.in); got != tc.want {
			t.Errorf("quoteIdent(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// unquoteIdent reads one quoted identifier as Postgres's lexer does, and reports whether s is
// exactly one.
func unquoteIdent(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '"' {
			if i+1 >= len(s)-1 || s[i+1] != '"' {
				return "", false // a lone quote ends the identifier early
			}
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// FuzzQuoteIdent: whatever the name, its quoting is one identifier that reads back as the
// name (less any NUL, which no Postgres name holds).
func FuzzQuoteIdent(f *testing.F) {
	for _, s := range []string{"id", `we"ird`, `"`, `""`, "a b", "ü", "a\x00", `"; --`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		q := quoteIdent(name)
		got, ok := unquoteIdent(q)
		if !ok {
			t.Fatalf("quoteIdent(%q) = %s is not one quoted identifier", name, q)
		}
		if want := strings.ReplaceAll(name, "\x00", ""); got != want {
			t.Fatalf("quoteIdent(%q) = %s reads back as %q", name, q, got)
		}
	})
}

func TestSplitTable(t *testing.T) {
	tests := []struct {
		in           string
		schema, name string
		ok           bool
	}{
		{"public.items", "public", "items", true},
		{"s.t.u", "s", "t.u", true},
		{`we"ird schema.Mixed "Case" t`, `we"ird schema`, `Mixed "Case" t`, true},
		{"items", "", "", false},
		{".items", "", "items", false},
		{"public.", "public", "", false},
	}
	for _, tc := range tests {
		schema, name, ok := splitTable(tc.in)
		if ok != tc.ok || ok && (schema != tc.schema || name != tc.name) {
			t.Errorf("splitTable(%q) = %q, %q, %v; want %q, %q, %v", tc.in, schema, name, ok, tc.schema, tc.name, tc.ok)
		}
	}
}

func TestDeclareSQL(t *testing.T) {
	got := declareSQL(`we"ird`, "Mixed Case", []Column{{"id", pgvalue.Int4OID}, {"has space", pgvalue.TextOID}, {`sel"ect`, pgvalue.Int4OID}},
		[]string{"has space", "id"}, `("id" > $1::int4)`)
	want := `DECLARE herald_snapshot NO SCROLL CURSOR FOR SELECT t."id", t."has space", t."sel""ect" FROM "we""ird"."Mixed Case" AS t ` +
		`WHERE ("id" > $1::int4) ORDER BY t."has space", t."id"`
	if got != want {
		t.Errorf("declareSQL =\n%s\nwant\n%s", got, want)
	}
}

func TestSetupSQL(t *testing.T) {
	const common = `SET LOCAL timezone = 'UTC'; SET LOCAL datestyle = 'ISO'; SET LOCAL intervalstyle = 'postgres'; ` +
		`SET LOCAL bytea_output = 'hex'; SET LOCAL extra_float_digits = 3; SET LOCAL cursor_tuple_fraction = 1; ` +
		`LOCK TABLE "public"."it""ems" IN ACCESS SHARE MODE`
	tests := []struct {
		major int
		want  string
	}{
		{15, `SET LOCAL statement_timeout = 1500; SET LOCAL idle_in_transaction_session_timeout = 1500; ` + common},
		{17, `SET LOCAL statement_timeout = 1500; SET LOCAL idle_in_transaction_session_timeout = 1500; SET LOCAL transaction_timeout = 1500; ` + common},
	}
	for _, tc := range tests {
		if got := setupSQL("public", `it"ems`, 1500, tc.major); got != tc.want {
			t.Errorf("setupSQL on %d =\n%s\nwant\n%s", tc.major, got, tc.want)
		}
	}
}

// TestFirstSQL pins the first statement: handoff's, then the sync-standby guard's count of this
// database's stalled commits, the look-back in whole milliseconds and never less than one.
func TestFirstSQL(t *testing.T) {
	guard := func(ms string) string {
		return handoff.FirstStatement + `, CASE WHEN current_setting('synchronous_standby_names') = '' THEN 0 ELSE ` +
			`(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event = 'SyncRep' ` +
			`AND datid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) AND xact_start < now() - interval '` + ms + ` milliseconds') END`
	}
	tests := []struct {
		name     string
		lookback time.Duration
		want     string
	}{
		{"the default", handoff.DefaultLookback, guard("10000")},
		{"fractions of a millisecond dropped", 1500*time.Millisecond + 700*time.Microsecond, guard("1500")},
		{"at least a millisecond", 300 * time.Microsecond, guard("1")},
		{"minutes", 2 * time.Minute, guard("120000")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstSQL(tc.lookback); got != tc.want {
				t.Errorf("firstSQL(%s) =\n%s\nwant\n%s", tc.lookback, got, tc.want)
			}
		})
	}
	if got := New(nil, Config{}).first; got != firstSQL(handoff.DefaultLookback) {
		t.Errorf("a Reader's first statement with the default look-back is\n%s", got)
	}
}

func TestFetchAndFenceSQL(t *testing.T) {
	if got := fetchSQL(500); got != "FETCH FORWARD 500 FROM herald_snapshot" {
		t.Errorf("fetchSQL = %s", got)
	}
	if got := fenceSQL(16); strings.Contains(got, "true") || !strings.Contains(got, "pg_logical_emit_message(false, $1::text, $2::text)") {
		t.Errorf("fenceSQL(16) = %s, want no flush argument", got)
	}
	if got := fenceSQL(17); !strings.Contains(got, "pg_logical_emit_message(false, $1::text, $2::text, true)") {
		t.Errorf("fenceSQL(17) = %s, want the flush argument", got)
	}
}

func TestConfig(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{MaxConcurrent: 4, QueueWait: 5 * time.Second, Timeout: 60 * time.Second, MaxRows: 100_000,
		MaxBytes: 64 << 20, PageRows: 500, PageBytes: 256 << 10, Lookback: 10 * time.Second}
	if got != want {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
	if err := (Config{PageRows: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "page_rows") {
		t.Errorf("a negative page_rows: %v", err)
	}
	if err := (Config{Lookback: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "lookback") {
		t.Errorf("a negative lookback: %v", err)
	}
	if got := (Config{MaxRows: -5}).withDefaults().MaxRows; got != DefaultMaxRows {
		t.Errorf("a negative MaxRows reads as %d, want the default", got)
	}
}

func TestRequestCheck(t *testing.T) {
	cols := []Column{{"id", pgvalue.Int4OID}, {"v", pgvalue.TextOID}}
	tests := []struct {
		name string
		req  Request
		want string // "" for none
	}{
		{"good", Request{Table: "public.t", Columns: cols, Key: []string{"id"}}, ""},
		{"no schema", Request{Table: "t", Columns: cols, Key: []string{"id"}}, "schema.table"},
		{"no columns", Request{Table: "public.t", Key: []string{"id"}}, "no columns"},
		{"no key", Request{Table: "public.t", Columns: cols}, "no key"},
		{"key not a column", Request{Table: "public.t", Columns: cols, Key: []string{"x"}}, `key column "x"`},
		{"a column twice", Request{Table: "public.t", Columns: append(cols, cols[0]), Key: []string{"id"}}, "named twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
	// Read refuses it without a database, and counts it.
	r := New(nil, Config{})
	if _, err := r.Read(t.Context(), Request{Table: "t"}, &recorder{}); err == nil {
		t.Fatal("Read took a malformed request")
	}
	if r.Stats().Done[OutcomeError] != 1 {
		t.Errorf("Stats = %+v", r.Stats())
	}
}

func TestRowBytesIsTheJSONSize(t *testing.T) {
	rd := &read{req: &Request{Columns: []Column{{"id", 0}, {`we"ird`, 0}, {"ü\n", 0}}}}
	rd.names = make([]int, len(rd.req.Columns))
	for i, c := range rd.req.Columns {
		rd.names[i] = len(change.AppendJSONString(nil, c.Name))
	}
	for _, row := range []change.Row{
		{},
		{{Name: "id", Value: []byte("1")}, {Name: `we"ird`, Value: []byte(`"x"`)}, {Name: "ü\n", Value: nil}},
		{{Name: "other", Value: []byte("null")}},
		{{Name: "ü\n", Value: []byte("[1,2]")}, {Name: "id", Value: []byte("2")}},
	} {
		if got, want := rd.rowBytes(row), int64(len(row.AppendJSON(nil))); got != want {
			t.Errorf("rowBytes(%s) = %d, want %d", row.AppendJSON(nil), got, want)
		}
	}
}

func TestOutcomes(t *testing.T) {
	seen := map[Outcome]bool{}
	for _, o := range Outcomes {
		if seen[o] {
			t.Errorf("%s listed twice", o)
		}
		seen[o] = true
		if o != OutcomeOK && o != OutcomeCanceled && o != OutcomeSink && o != OutcomeError && !handoff.Reason(o).Valid() {
			t.Errorf("%s is neither an outcome of its own nor a hand-off reason", o)
		}
		if !utf8.ValidString(string(o)) || strings.ContainsAny(string(o), " \"") {
			t.Errorf("%q is no metric label", o)
		}
	}
	for _, err := range []error{
		&handoff.Error{Reason: handoff.ReasonBusy}, errors.New("x"), nil,
	} {
		if o := outcomeOf(err); !seen[o] {
			t.Errorf("outcomeOf(%v) = %s, not in Outcomes", err, o)
		}
	}
}

// TestDocDefaults keeps the defaults the package comment lists in step with the code.
func TestDocDefaults(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		fmt.Sprintf("MaxConcurrent  %d ", DefaultMaxConcurrent),
		fmt.Sprintf("QueueWait      %s ", DefaultQueueWait),
		fmt.Sprintf("Timeout        %ds ", int(DefaultTimeout.Seconds())),
		"MaxRows        100,000 ",
		fmt.Sprintf("MaxBytes       %d MiB ", DefaultMaxBytes>>20),
		fmt.Sprintf("PageRows       %d ", DefaultPageRows),
		fmt.Sprintf("PageBytes      %d KiB ", DefaultPageBytes>>10),
		fmt.Sprintf("Lookback       %s ", handoff.DefaultLookback),
	} {
		if !strings.Contains(string(doc), "//\t"+line) {
			t.Errorf("doc.go does not list the default %q", strings.TrimSpace(line))
		}
	}
	if DefaultMaxRows != 100_000 {
		t.Errorf("DefaultMaxRows is %d; doc.go says 100,000", DefaultMaxRows)
	}
}
