package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

type fakeSchema map[string]TableInfo

func (f fakeSchema) Table(_ context.Context, table string) (TableInfo, error) {
	return f[table], nil
}

var schema = fakeSchema{"public.items": {Columns: []filter.Column{
	{Name: "id", OID: pgvalue.Int4OID},
	{Name: "org_id", OID: pgvalue.TextOID},
	{Name: "qty", OID: pgvalue.Int4OID},
}, Key: []string{"id"}, Identity: IdentityFull}}

// recorder is a Target that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	frames map[string][]map[string]any // guarded by mu
	counts map[string][]uint64         // guarded by mu: the items each frame stands for
	n      int
}

func newRecorder() *recorder {
	return &recorder{frames: map[string][]map[string]any{}, counts: map[string][]uint64{}}
}

// Push records the frame a herald.v1 client would get, and how many items it stands for (a
// gap's count; 1 for a change).
func (r *recorder) Push(sub string, it *stream.Item) {
	var frame []byte
	count := uint64(1)
	if it.Gap != nil {
		frame, count = wire.AppendGap(nil, sub, it.Gap), it.Gap.Lost
	} else {
		frame = append(wire.Codec{}.Head(sub, true), it.Encoded(wire.Codec{})...)
	}
	var m map[string]any
	if err := json.Unmarshal(frame, &m); err != nil {
		panic(fmt.Sprintf("invalid frame %s: %v", frame, err))
	}
	r.mu.Lock()
	r.frames[sub] = append(r.frames[sub], m)
	r.counts[sub] = append(r.counts[sub], count)
	r.n++
	r.mu.Unlock()
}

// ops returns each sub's frames as "op:id".
func (r *recorder) ops() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for sub, fs := range r.frames {
		for _, m := range fs {
			id := "-"
			for _, k := range []string{"row", "old"} {
				if row, ok := m[k].(map[string]any); ok && row["id"] != nil {
					id = fmt.Sprint(row["id"])
					break
				}
			}
			op, _ := m["op"].(string)
			if m["type"] == "resync" {
				op = "resync"
			}
			out[sub] = append(out[sub], op+":"+id)
		}
	}
	return out
}

func row(id int, org string, qty int) change.Row {
	return change.Row{
		{Name: "id", Value: json.RawMessage(fmt.Sprint(id))},
		{Name: "org_id", Value: json.RawMessage(`"` + org + `"`)},
		{Name: "qty", Value: json.RawMessage(fmt.Sprint(qty))},
	}
}

func keyOnly(id int) change.Row {
	return change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(id))}}
}

func newRouter(t testing.TB) *Router {
	t.Helper()
	r, err := New(Config{Schema: schema, Tables: []string{"public.items"}, Bus: bus.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	r.Seed(1) // the stream is live
	return r
}

func subscribe(t testing.TB, r *Router, target stream.Receiver, sub, filter string, cols ...string) func() {
	t.Helper()
	req := Request{Table: "public.items", Sub: sub, Target: target}
	if filter != "" {
		req.Filter = json.RawMessage(filter)
	}
	if cols != nil {
		req.Columns = cols
	}
	_, un, err := r.Subscribe(context.Background(), req)
	if err != nil {
		t.Fatalf("subscribe %s %s: %v", sub, filter, err)
	}
	return un
}

func txn(lsn change.LSN, events ...change.Event) *change.Txn {
	for i := range events {
		events[i].LSN = lsn
		events[i].Table = "public.items"
	}
	return &change.Txn{CommitLSN: lsn, EndLSN: lsn + 1, Events: events, CommitTime: time.Now()}
}

func TestViewsAcrossFilterBoundaries(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	subscribe(t, r, rec, "all", "")
	subscribe(t, r, rec, "acme", `{"eq":["org_id","acme"]}`)
	subscribe(t, r, rec, "big", `{"gt":["qty",5]}`)
	steps := []*change.Txn{
		txn(10, change.Event{Op: change.Insert, After: row(1, "acme", 1)}),
		txn(20, change.Event{Op: change.Update, Before: row(1, "acme", 1), After: row(1, "acme", 9)}),   // enters big
		txn(30, change.Event{Op: change.Update, Before: row(1, "acme", 9), After: row(1, "globex", 9)}), // leaves acme
		txn(40, change.Event{Op: change.Update, Before: row(1, "globex", 9), After: row(1, "acme", 2)}), // enters acme, leaves big
		txn(50, change.Event{Op: change.Update, After: row(1, "acme", 3), Key: []string{"id"}}),         // no old image (identity no longer FULL): upsert, or remove if present
		txn(60, change.Event{Op: change.Delete, Before: keyOnly(1), BeforeKeyOnly: true}),               // key only: remove if present
		txn(70, change.Event{Op: change.Truncate}),
	}
	for _, tx := range steps {
		if err := r.Accept(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{
		"all":  {"insert:1", "update:1", "update:1", "update:1", "update:1", "delete:1", "truncate:-"},
		"acme": {"insert:1", "update:1", "leave:1", "enter:1", "update:1", "delete:1", "truncate:-"},
		"big":  {"enter:1", "update:1", "leave:1", "leave:1", "delete:1", "truncate:-"},
	}
	if diff := cmp.Diff(want, rec.ops()); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	if h := r.Head(); h != 70 {
		t.Errorf("head %s, want 0/46", h)
	}
}

func TestLeaveNeverCarriesTheNewValues(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	subscribe(t, r, rec, "acme", `{"eq":["org_id","acme"]}`)
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Update, Before: row(1, "acme", 1), After: row(1, "secret-org", 1)}))
	f := rec.frames["acme"][0]
	if f["op"] != "leave" || f["row"] != nil || fmt.Sprint(f["old"]) != "map[id:1 org_id:acme qty:1]" {
		t.Errorf("leave frame %v: want the old image only", f)
	}
}

func TestColumnListAndSharedBodies(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	subscribe(t, r, rec, "slim", "", "id")
	subscribe(t, r, rec, "full", "")
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(7, "acme", 1)}))
	if got := fmt.Sprint(rec.frames["slim"][0]["row"]); got != "map[id:7]" {
		t.Errorf("slim row %s", got)
	}
	if got := fmt.Sprint(rec.frames["full"][0]["row"]); got != "map[id:7 org_id:acme qty:1]" {
		t.Errorf("full row %s", got)
	}
}

func TestOverflowBecomesAResyncForEverySubscriber(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	subscribe(t, r, rec, "acme", `{"eq":["org_id","acme"]}`)
	subscribe(t, r, rec, "all", "")
	_ = r.Accept(context.Background(), &change.Txn{CommitLSN: 99, EndLSN: 100,
		Overflow: &change.Overflow{Tables: map[string]int{"public.items": 5000, "public.other": 2000}, Changes: 7000}})
	// lost is given only when exact: an unfiltered subscription would have had every one of
	// the table's changes, a filtered one an unknown few of them.
	for _, tt := range []struct {
		sub   string
		lost  any
		count uint64
	}{{"acme", nil, 0}, {"all", float64(5000), 5000}} {
		fs := rec.frames[tt.sub]
		if len(fs) != 1 || fs[0]["type"] != "resync" || fs[0]["reason"] != "transaction_too_large" || fs[0]["lost"] != tt.lost {
			t.Errorf("%s frames %v, want one transaction_too_large resync with lost %v", tt.sub, fs, tt.lost)
		}
		if got := rec.counts[tt.sub]; len(got) != 1 || got[0] != tt.count {
			t.Errorf("%s resync stands for %v items, want %d (0: unknown)", tt.sub, got, tt.count)
		}
	}
}

func TestUnsubscribeStopsDelivery(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	un := subscribe(t, r, rec, "acme", `{"eq":["org_id","acme"]}`)
	un()
	un()
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(1, "acme", 1)}))
	if rec.n != 0 {
		t.Errorf("delivered %d frames after unsubscribe", rec.n)
	}
	if st := r.Stats(); st.Subscriptions != 0 {
		t.Errorf("stats %+v after unsubscribe", st)
	}
}

func TestSubscribeBeforeTheStreamIsLiveIsUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name   string
		schema Schema
	}{
		{"a published table", schema},
		// On a first start the changefeed creates its publication before the stream goes
		// live: until then the catalog says no table is published.
		{"no publication yet", fakeSchema{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{Schema: tt.schema, Bus: bus.NewMemory()})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: newRecorder()})
			if wire.CodeOf(err) != wire.CodeUnavailable {
				t.Fatalf("subscribe before the stream is live: %v, want unavailable", err)
			}
		})
	}
}

// TestOldImageFollowsEachGroupsView: two groups get an update with different old images (one
// saw the old row, one did not); neither may receive the other's.
func TestOldImageFollowsEachGroupsView(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	subscribe(t, r, rec, "big", `{"gt":["qty",5]}`)
	subscribe(t, r, rec, "small", `{"lt":["qty",50]}`)
	for i := 0; i < 20; i++ {
		_ = r.Accept(context.Background(), txn(change.LSN(10+i), change.Event{Op: change.Update, Before: row(1, "acme", 90), After: row(1, "acme", 9)}))
	}
	for _, f := range rec.frames["small"] {
		if f["old"] != nil {
			t.Fatalf("small, whose filter excluded the old row, got its old image: %v", f)
		}
	}
	if len(rec.frames["big"]) == 0 || rec.frames["big"][0]["old"] == nil {
		t.Fatalf("big frames %v: want the old image it saw", rec.frames["big"])
	}
}

func TestSubscribeRefusals(t *testing.T) {
	r := newRouter(t)
	for _, tt := range []struct {
		table, filter string
		cols          []string
		code          wire.Code
	}{
		{"public.other", "", nil, wire.CodeUnknownTable},
		{"public.items", `{"eq":["nope",1]}`, nil, wire.CodeUnknownColumn},
		{"public.items", `{"eq":["qty","x"]}`, nil, wire.CodeBadFilter},
		{"public.items", "", []string{"zz"}, wire.CodeUnknownColumn},
	} {
		req := Request{Table: tt.table, Sub: "s", Target: newRecorder(), Columns: tt.cols}
		if tt.filter != "" {
			req.Filter = json.RawMessage(tt.filter)
		}
		_, _, err := r.Subscribe(context.Background(), req)
		if wire.CodeOf(err) != tt.code {
			t.Errorf("%s %s %v: got %v, want %s", tt.table, tt.filter, tt.cols, err, tt.code)
		}
	}
}

// TestOnlyMatchingFiltersAreEvaluated shows the index at work: a change evaluates the filters
// of its own org, not the table's.
func TestOnlyMatchingFiltersAreEvaluated(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	for org := 0; org < 1000; org++ {
		subscribe(t, r, rec, fmt.Sprintf("s%d", org), fmt.Sprintf(`{"and":[{"eq":["org_id","org%d"]},{"gt":["qty",0]}]}`, org))
	}
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(1, "org7", 1)}))
	if st := r.Stats(); st.Evaluations > 2 {
		t.Errorf("%d filter evaluations for one change among 1000 orgs, want 1", st.Evaluations)
	}
	if got := rec.ops(); len(got) != 1 || len(got["s7"]) != 1 {
		t.Errorf("deliveries %v, want s7 only", got)
	}
}

// countTarget counts deliveries without decoding them.
type countTarget struct{ n int }

func (c *countTarget) Push(string, *stream.Item) { c.n++ }

// routeBench routes changes that each match exactly 10 of subs subscriptions, spread over
// subs/10 org_id values.
func routeBench(b *testing.B, subs int) {
	r := newRouter(b)
	target := &countTarget{}
	orgs := subs / 10
	for i := 0; i < subs; i++ {
		subscribe(b, r, target, fmt.Sprintf("s%d", i), fmt.Sprintf(`{"eq":["org_id","org%d"]}`, i%orgs))
	}
	events := make([]*change.Txn, 256)
	for i := range events {
		events[i] = txn(change.LSN(i+1), change.Event{Op: change.Insert, After: row(i, fmt.Sprintf("org%d", (i*7919)%orgs), 1)})
	}
	runtime.GC() // the setup's garbage is not the routing's cost
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = r.Accept(context.Background(), events[i%len(events)])
	}
	b.StopTimer()
	if target.n != b.N*10 {
		b.Fatalf("%d deliveries for %d changes, want 10 each", target.n, b.N)
	}
}

// BenchmarkRoute measures time per change at 1k and 100k subscriptions on one table (10k
// org_id values at 100k), each change matching 10 subscriptions. The index makes the cost
// follow the matches, not the table's subscriptions: the ratio it logs should stay near 1.
//
//	go test -run '^$' -bench BenchmarkRoute -benchmem ./internal/router/
func BenchmarkRoute(b *testing.B) {
	per := map[int]float64{}
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			routeBench(b, n)
			per[n] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	if per[1000] > 0 && per[100000] > 0 {
		fmt.Printf("time per change: %.0f ns at 1k subscriptions, %.0f ns at 100k: ratio 100k/1k = %.2f\n",
			per[1000], per[100000], per[100000]/per[1000])
	}
}

func TestSystemCatalogsAreNeverSubscribable(t *testing.T) {
	r, err := New(Config{Bus: bus.NewMemory(), Schema: fakeSchema{"pg_catalog.pg_authid": {Columns: []filter.Column{{Name: "rolname", OID: pgvalue.NameOID}}, Identity: IdentityFull}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Seed(10)
	_, _, err = r.Subscribe(context.Background(), Request{Table: "pg_catalog.pg_authid", Sub: "s", Target: newRecorder()})
	if wire.CodeOf(err) != wire.CodeUnknownTable {
		t.Fatalf("subscribe to pg_catalog.pg_authid: %v, want unknown_table", err)
	}
}

// BenchmarkRouteUnderSubscribeChurn measures what the router's one lock costs routing: time
// per change (each matching 10 of 10k subscriptions) while another goroutine subscribes and
// unsubscribes with a 500µs pause between (it reports the rate it reached), against the same
// with no churn. Routing itself is one goroutine by design (the changefeed's sink, in commit order),
// so the lock is contended only by subscribes, which parse outside it and hold it for an O(1)
// index update; the ratio it logs says whether that caps routing.
//
//	go test -run '^$' -bench BenchmarkRouteUnderSubscribeChurn ./internal/router/
func BenchmarkRouteUnderSubscribeChurn(b *testing.B) {
	per := map[int]float64{}
	for _, churners := range []int{0, 1} {
		b.Run(fmt.Sprintf("churners=%d", churners), func(b *testing.B) {
			r := newRouter(b)
			target := &countTarget{}
			const subs, orgs = 10000, 1000
			for i := 0; i < subs; i++ {
				subscribe(b, r, target, fmt.Sprintf("s%d", i), fmt.Sprintf(`{"eq":["org_id","org%d"]}`, i%orgs))
			}
			events := make([]*change.Txn, 256)
			for i := range events {
				events[i] = txn(change.LSN(i+1), change.Event{Op: change.Insert, After: row(i, fmt.Sprintf("org%d", (i*7919)%orgs), 1)})
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var churned atomic.Int64
			for c := 0; c < churners; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					other := &countTarget{}
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, un, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "c",
							Target: other, Filter: json.RawMessage(fmt.Sprintf(`{"eq":["org_id","churn%d"]}`, i%50))})
						if err == nil {
							un()
							churned.Add(1)
						}
						time.Sleep(500 * time.Microsecond)
					}
				}()
			}
			runtime.GC()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = r.Accept(context.Background(), events[i%len(events)])
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			per[churners] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(churned.Load())/b.Elapsed().Seconds(), "subscribes/s")
		})
	}
	if per[0] > 0 && per[1] > 0 {
		fmt.Printf("time per change: %.0f ns alone, %.0f ns while subscribing: ratio %.2f\n", per[0], per[1], per[1]/per[0])
	}
}

// TestTokens: a change's interest tokens are AnyToken and a k: token per indexable value of
// its images; a change with a column the schema lacks (added since the schema was read) gives
// ErrCatalogBehind, so the replicator routes it to every node holding the table; a truncate
// has AnyToken alone.
func TestTokens(t *testing.T) {
	r := newRouter(t)
	ctx := context.Background()
	full := []string{"id", "org_id", "qty"}
	upd := change.Event{Table: "public.items", Op: change.Update, Before: row(1, "acme", 2), After: row(1, "globex", 2), Key: full}
	got, err := r.Tokens(ctx, &upd, nil)
	if want := []string{AnyToken, "k:id=1", "k:org_id=acme", "k:org_id=globex", "k:qty=2"}; err != nil || !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("Tokens(update) = %v, %v; want %v", got, err, want)
	}
	// The identity dropped to DEFAULT: the old image holds the key alone, and the columns it
	// leaves out are named by their unlogged tokens.
	moved := change.Event{Table: "public.items", Op: change.Update, After: row(1, "globex", 2), Key: []string{"id"}}
	got, err = r.Tokens(ctx, &moved, nil)
	if want := []string{AnyToken, "k:id=1", "k:org_id=globex", "k:qty=2", "u:org_id", "u:qty"}; err != nil || !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("Tokens(update under DEFAULT) = %v, %v; want %v", got, err, want)
	}
	ins := change.Event{Table: "public.items", Op: change.Insert, After: row(4, "acme", 1), Key: []string{"id"}}
	if got, err := r.Tokens(ctx, &ins, nil); err != nil || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "u:") }) {
		t.Errorf("Tokens(insert) = %v, %v; want no unlogged token: an insert has no old image to miss", got, err)
	}
	added := change.Event{Table: "public.items", Op: change.Insert,
		After: append(row(2, "acme", 1), change.Column{Name: "region", Value: json.RawMessage(`"eu"`)})}
	if got, err := r.Tokens(ctx, &added, nil); !errors.Is(err, ErrCatalogBehind) || !slices.Contains(got, "k:org_id=acme") {
		t.Errorf("Tokens(a change with a column the schema lacks) = %v, %v; want ErrCatalogBehind beside the tokens it could name", got, err)
	}
	del := change.Event{Table: "public.items", Op: change.Delete, Before: append(keyOnly(3), change.Column{Name: "region", Value: json.RawMessage(`"eu"`)}), Key: full}
	if _, err := r.Tokens(ctx, &del, nil); !errors.Is(err, ErrCatalogBehind) {
		t.Errorf("Tokens(an old image with a column the schema lacks) = %v; want ErrCatalogBehind", err)
	}
	trunc := change.Event{Table: "public.items", Op: change.Truncate}
	if got, err := r.Tokens(ctx, &trunc, nil); err != nil || !slices.Equal(got, []string{AnyToken}) {
		t.Errorf("Tokens(truncate) = %v, %v; want [%s]", got, err, AnyToken)
	}
}

// TestUnloggedToken: a filter pinning one column outside the identity key has a second
// token; one pinning a key column, or none, has not.
func TestUnloggedToken(t *testing.T) {
	for _, tc := range []struct {
		filter string
		key    []string
		want   string
	}{
		{`{"eq":["org_id","acme"]}`, []string{"id"}, "u:org_id"},
		{`{"eq":["id",7]}`, []string{"id"}, ""},
		{`{"eq":["org_id","acme"]}`, []string{"id", "org_id"}, ""},
		{`{"gt":["qty",1]}`, []string{"id"}, ""},
		{"", []string{"id"}, ""},
	} {
		var f *filter.Filter
		if tc.filter != "" {
			var err error
			if f, err = filter.Parse(json.RawMessage(tc.filter), schema["public.items"].Columns); err != nil {
				t.Fatal(err)
			}
		}
		if got := UnloggedToken(f, tc.key); got != tc.want {
			t.Errorf("UnloggedToken(%s, key %v) = %q, want %q", tc.filter, tc.key, got, tc.want)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}
