package changefeed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/testenv"
)

const itemsTable = `CREATE TABLE items (id bigint PRIMARY KEY, org_id text, body text, n int, at timestamptz)`

func TestInsertUpdateDeleteInCommitOrder(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	cfg := testConfig(url, "public.items")
	cfg.TenantColumn = "org_id"
	start(t, cfg, sink)

	testenv.Exec(t, url,
		`INSERT INTO items VALUES (1, 'acme', 'one', 1, '2024-01-06 14:00:00.123456+05:30')`,
		`BEGIN; INSERT INTO items VALUES (2, 'acme', 'two', 2, NULL); UPDATE items SET n = 20 WHERE id = 2; COMMIT`,
		`DELETE FROM items WHERE id = 1`,
	)
	txns, events := sink.waitFor(t, "3 transactions", func(tx []*change.Txn, _ []change.Event) bool { return len(tx) >= 3 })
	if len(txns) != 3 {
		t.Fatalf("got %d transactions, want 3", len(txns))
	}
	want := []struct {
		op    change.Op
		after string
	}{
		{change.Insert, `{"id":1,"org_id":"acme","body":"one","n":1,"at":"2024-01-06T08:30:00.123Z"}`},
		{change.Insert, `{"id":2,"org_id":"acme","body":"two","n":2,"at":null}`},
		{change.Update, `{"id":2,"org_id":"acme","body":"two","n":20,"at":null}`},
		{change.Delete, `null`},
	}
	if len(events) != len(want) {
		t.Fatalf("got %d events, want %d: %s", len(events), len(want), summarize(events))
	}
	for i, w := range want {
		e := events[i]
		// Identity default: a delete's old image is the key alone, so its tenant is unknown.
		wantTenant := "acme"
		if e.Op == change.Delete {
			wantTenant = ""
		}
		if e.Op != w.op || mustJSON(e.After) != w.after || e.Table != "public.items" || e.Tenant != wantTenant {
			t.Errorf("event %d = %s %s after=%s tenant=%q, want %s public.items after=%s tenant=%q", i, e.Op, e.Table, mustJSON(e.After), e.Tenant, w.op, w.after, wantTenant)
		}
	}
	// Identity default: a delete's old image holds the key only.
	if got := mustJSON(events[3].Before); got != `{"id":1}` || !events[3].BeforeKeyOnly {
		t.Errorf("delete before = %s key-only=%v, want {\"id\":1} key-only", got, events[3].BeforeKeyOnly)
	}
	// Positions: one per transaction, strictly increasing, shared by the events of a transaction.
	for i := 1; i < len(txns); i++ {
		if txns[i].CommitLSN <= txns[i-1].CommitLSN {
			t.Errorf("commit LSNs not increasing: %s then %s", txns[i-1].CommitLSN, txns[i].CommitLSN)
		}
	}
	for _, tx := range txns {
		if tx.EndLSN <= tx.CommitLSN || tx.XID == 0 || tx.CommitTime.IsZero() {
			t.Errorf("txn %+v: want end > commit, a txid and a commit time", tx)
		}
		for _, e := range tx.Events {
			if e.LSN != tx.CommitLSN || e.TxID != tx.XID || !e.CommitTime.Equal(tx.CommitTime) {
				t.Errorf("event %s carries lsn=%s txid=%d, want the transaction's %s %d", e.Op, e.LSN, e.TxID, tx.CommitLSN, tx.XID)
			}
		}
	}
	if events[1].TxID != events[2].TxID {
		t.Errorf("insert and update of one transaction have txids %d and %d", events[1].TxID, events[2].TxID)
	}
}

func TestToastUnchangedColumn(t *testing.T) {
	// EXTERNAL storage keeps the value out of line and uncompressed, so 3 kB is surely TOASTed.
	for _, tt := range []struct {
		name, identity string
		wantOmitted    []string
		wantBody       bool
	}{
		{"identity default", "DEFAULT", []string{"body"}, false},
		{"identity full", "FULL", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url := db(t, itemsTable,
				`ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL`,
				`ALTER TABLE items REPLICA IDENTITY `+tt.identity)
			sink := newCollector()
			start(t, testConfig(url, "items"), sink)
			big := strings.Repeat("x", 3000)
			testenv.Exec(t, url,
				fmt.Sprintf(`INSERT INTO items VALUES (1, 'acme', '%s', 1, NULL)`, big),
				`UPDATE items SET n = 2 WHERE id = 1`)
			events := sink.waitEvents(t, 2)
			up := events[1]
			if up.Op != change.Update {
				t.Fatalf("event 1 is %s, want update", up.Op)
			}
			if diff := cmp.Diff(tt.wantOmitted, up.Omitted); diff != "" {
				t.Errorf("omitted (-want +got):\n%s", diff)
			}
			body, ok := up.After.Get("body")
			if ok != tt.wantBody {
				t.Fatalf("after has body = %v, want %v (after=%.80s)", ok, tt.wantBody, mustJSON(up.After))
			}
			if ok && string(body) != `"`+big+`"` {
				t.Errorf("body filled from the old image is %.40s..., want the 3000-byte value", body)
			}
			if got := col(t, up.After, "n"); got != "2" {
				t.Errorf("n = %s, want 2", got)
			}
			// Columns stay in table order even when one is filled from the old image.
			var names []string
			for _, c := range up.After {
				names = append(names, c.Name)
			}
			want := []string{"id", "org_id", "body", "n", "at"}
			if !tt.wantBody {
				want = []string{"id", "org_id", "n", "at"}
			}
			if diff := cmp.Diff(want, names); diff != "" {
				t.Errorf("after columns (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTruncateOfTwoTablesInOneStatement(t *testing.T) {
	url := db(t, itemsTable, `CREATE TABLE other (id int PRIMARY KEY)`,
		`INSERT INTO items VALUES (1, 'a', 'b', 1, NULL)`, `INSERT INTO other VALUES (1)`)
	sink := newCollector()
	start(t, testConfig(url, "items", "other"), sink)
	testenv.Exec(t, url, `TRUNCATE items, other`)
	txns, events := sink.waitFor(t, "a truncate", func(tx []*change.Txn, _ []change.Event) bool { return len(tx) >= 1 })
	if len(txns) != 1 || len(events) != 2 {
		t.Fatalf("got %d transactions with %d events, want 1 with 2: %s", len(txns), len(events), summarize(events))
	}
	got := map[string]bool{}
	for _, e := range events {
		if e.Op != change.Truncate || e.After != nil || e.Before != nil {
			t.Errorf("event %+v, want a rowless truncate", e)
		}
		got[e.Table] = true
	}
	if !got["public.items"] || !got["public.other"] {
		t.Errorf("truncated tables %v, want public.items and public.other", got)
	}
}

func TestSchemaChangeMidStream(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	start(t, testConfig(url, "items"), sink)
	testenv.Exec(t, url,
		`INSERT INTO items VALUES (1, 'a', 'b', 1, NULL)`,
		`ALTER TABLE items ADD COLUMN tags text[] DEFAULT '{x}'`,
		`INSERT INTO items VALUES (2, 'a', 'b', 2, NULL, '{p,"q r",NULL}')`,
		`ALTER TABLE items ALTER COLUMN n TYPE numeric USING n::numeric`,
		`ALTER TABLE items DROP COLUMN body`,
		`INSERT INTO items VALUES (3, 'a', 3.5, NULL, '{}')`,
	)
	events := sink.waitEvents(t, 3)
	want := []string{
		`{"id":1,"org_id":"a","body":"b","n":1,"at":null}`,
		`{"id":2,"org_id":"a","body":"b","n":2,"at":null,"tags":["p","q r",null]}`,
		`{"id":3,"org_id":"a","n":3.5,"at":null,"tags":[]}`,
	}
	for i, w := range want {
		if got := mustJSON(events[i].After); got != w {
			t.Errorf("event %d after = %s, want %s", i, got, w)
		}
	}
}

func TestLargeTransactionStreamedInProgress(t *testing.T) {
	// scripts/testenv sets logical_decoding_work_mem = 64kB, so these transactions are streamed
	// in segments (protocol 2) long before they commit.
	url := db(t, itemsTable)
	sink := newCollector()
	start(t, testConfig(url, "items"), sink)

	testenv.Exec(t, url,
		// Aborted whole: nothing of it may arrive.
		`BEGIN; INSERT INTO items SELECT g, 'gone', repeat('z', 50), g, NULL FROM generate_series(1000001, 1030000) g; ROLLBACK`,
		// Committed, with one subtransaction rolled back inside it.
		`BEGIN;
		 INSERT INTO items SELECT g, 'big', repeat('y', 50), g, NULL FROM generate_series(1, 60000) g;
		 SAVEPOINT s;
		 INSERT INTO items SELECT g, 'undone', repeat('u', 50), g, NULL FROM generate_series(2000001, 2020000) g;
		 ROLLBACK TO SAVEPOINT s;
		 INSERT INTO items SELECT g, 'big', repeat('y', 50), g, NULL FROM generate_series(60001, 100000) g;
		 COMMIT`,
		`INSERT INTO items VALUES (0, 'after', 'x', 0, NULL)`,
	)
	txns, events := sink.waitFor(t, "the large transaction and the one after it", func(tx []*change.Txn, _ []change.Event) bool { return len(tx) >= 2 })
	if len(txns) != 2 {
		t.Fatalf("got %d transactions, want 2", len(txns))
	}
	if n := len(txns[0].Events); n != 100000 {
		t.Fatalf("large transaction has %d events, want 100000", n)
	}
	for i, e := range txns[0].Events {
		if got, want := col(t, e.After, "id"), fmt.Sprint(i+1); got != want {
			t.Fatalf("event %d has id %s, want %s (order or an aborted subtransaction leaked)", i, got, want)
		}
	}
	if got := col(t, events[len(events)-1].After, "org_id"); got != `"after"` {
		t.Errorf("last event org_id = %s, want \"after\"", got)
	}
	var streamed int64
	c := connect(t, url)
	if err := c.QueryRow(context.Background(), `SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots`).Scan(&streamed); err != nil {
		t.Fatal(err)
	}
	if streamed == 0 {
		t.Errorf("pg_stat_replication_slots.stream_txns = 0: the transactions were not streamed in progress, so this test did not test streaming")
	}
}

func TestTimestampsDecodeToTheRightInstantWhateverTheServerZone(t *testing.T) {
	url := db(t, itemsTable)
	// The database's own zone is New York, where an 1883 instant prints with the local mean
	// time offset -04:56:02. The walsender's session is pinned to UTC, so the stream carries
	// +00; and the decoder reads the LMT spelling to the same instant.
	c := connect(t, url)
	if _, err := c.Exec(context.Background(), `ALTER DATABASE `+dbName(t, url)+` SET timezone = 'America/New_York'`); err != nil {
		t.Fatal(err)
	}
	sink := newCollector()
	start(t, testConfig(url, "items"), sink)
	testenv.Exec(t, url,
		`INSERT INTO items VALUES (1, 'a', 'b', 1, '1883-11-18 12:00:00+00')`,
		`INSERT INTO items VALUES (2, 'a', 'b', 1, '2024-07-01 10:00:00.987654+05:30')`,
		`INSERT INTO items VALUES (3, 'a', 'b', 1, 'infinity')`,
	)
	events := sink.waitEvents(t, 3)
	for i, want := range []string{`"1883-11-18T12:00:00.000Z"`, `"2024-07-01T04:30:00.987Z"`, `"infinity"`} {
		if got := col(t, events[i].After, "at"); got != want {
			t.Errorf("event %d at = %s, want %s", i, got, want)
		}
	}
	// The same instant as a New York session prints it.
	c2 := connect(t, url)
	var text string
	if err := c2.QueryRow(context.Background(), `SELECT at::text FROM items WHERE id = 1`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, "-04:56:02") {
		t.Fatalf("New York session printed %q; want the LMT offset -04:56:02 (is tzdata installed?)", text)
	}
	if got := string(pgvalue.JSON(pgvalue.TimestamptzOID, []byte(text))); got != `"1883-11-18T12:00:00.000Z"` {
		t.Errorf("decoding %q = %s, want \"1883-11-18T12:00:00.000Z\"", text, got)
	}
}

func dbName(t *testing.T, url string) string {
	t.Helper()
	var name string
	if err := connect(t, url).QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestWriteTagAndMessages(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	cfg := testConfig(url, "items")
	cfg.MessagePrefixes = []string{"app.note"}
	start(t, cfg, sink)
	testenv.Exec(t, url,
		`BEGIN; INSERT INTO items VALUES (1, 'a', 'b', 1, NULL); SELECT pg_logical_emit_message(true, 'herald.write', 'client-42:7'); INSERT INTO items VALUES (2, 'a', 'b', 1, NULL); COMMIT`,
		`INSERT INTO items VALUES (3, 'a', 'b', 1, NULL)`,
		`SELECT pg_logical_emit_message(false, 'app.note', 'hello')`,
		`SELECT pg_logical_emit_message(false, 'other.prefix', 'ignored')`,
		`BEGIN; SELECT pg_logical_emit_message(true, 'app.note', 'in-tx'); INSERT INTO items VALUES (4, 'a', 'b', 1, NULL); COMMIT`,
	)
	events := sink.waitEvents(t, 6)
	type ev struct{ Op, Tag, Prefix, Content string }
	var got []ev
	for _, e := range events {
		got = append(got, ev{string(e.Op), e.WriteTag, e.Prefix, e.Content})
	}
	want := []ev{
		{"insert", "client-42:7", "", ""},
		{"insert", "client-42:7", "", ""},
		{"insert", "", "", ""},
		{"message", "", "app.note", "hello"},
		{"message", "", "app.note", "in-tx"},
		{"insert", "", "", ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestRestartResumesWithNoGapAndNoDuplicate(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	cfg := testConfig(url, "items")
	r := start(t, cfg, sink)
	for i := 1; i <= 5; i++ {
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items VALUES (%d, 'a', 'b', 1, NULL)`, i))
	}
	first := sink.waitEvents(t, 5)
	if err := r.halt(t); err != nil {
		t.Fatalf("Run after stop: %v", err)
	}
	// Written while nothing streams.
	for i := 6; i <= 10; i++ {
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items VALUES (%d, 'a', 'b', 1, NULL)`, i))
	}
	// A new process knows only the last position it saw; Postgres may resend from before it.
	cfg.From = first[len(first)-1].LSN
	sink2 := newCollector()
	start(t, cfg, sink2)
	testenv.Exec(t, url, `INSERT INTO items VALUES (11, 'a', 'b', 1, NULL)`)
	events := sink2.waitEvents(t, 6)
	time.Sleep(300 * time.Millisecond)
	_, events = sink2.snapshot()
	var ids []string
	for _, e := range events {
		ids = append(ids, col(t, e.After, "id"))
	}
	if diff := cmp.Diff([]string{"6", "7", "8", "9", "10", "11"}, ids); diff != "" {
		t.Errorf("ids after restart (-want +got):\n%s", diff)
	}
}

func TestReconnectAfterBackendDiesHandsNothingOnTwice(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	var ends atomic.Int32
	cfg := testConfig(url, "items")
	cfg.OnEnd = func(error) { ends.Add(1) }
	r := start(t, cfg, sink)
	for i := 1; i <= 3; i++ {
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items VALUES (%d, 'a', 'b', 1, NULL)`, i))
	}
	sink.waitEvents(t, 3)
	// Kill the walsender before it can have been told about the last transactions.
	testenv.Exec(t, url, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = current_database()`)
	for i := 4; i <= 6; i++ {
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items VALUES (%d, 'a', 'b', 1, NULL)`, i))
	}
	events := sink.waitEvents(t, 6)
	time.Sleep(500 * time.Millisecond)
	_, events = sink.snapshot()
	var ids []string
	for _, e := range events {
		ids = append(ids, col(t, e.After, "id"))
	}
	if diff := cmp.Diff([]string{"1", "2", "3", "4", "5", "6"}, ids); diff != "" {
		t.Errorf("ids across the reconnect (-want +got):\n%s", diff)
	}
	if n := ends.Load(); n != 1 {
		t.Errorf("OnEnd called %d times, want once", n)
	}
	st := r.feed.Stats()
	if st.Restarts < 1 || !st.Streaming || st.Failure != "" {
		t.Errorf("stats after restart = %+v, want a restart, streaming, failure cleared", st)
	}
}

func TestConfirmsOnlyAcceptedTransactions(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	refused := atomic.Bool{}
	sink.refuse = func(txn *change.Txn) error {
		if len(txn.Events) > 0 && col(t, txn.Events[0].After, "id") == "2" && !refused.Swap(true) {
			return errors.New("downstream is full")
		}
		return nil
	}
	start(t, testConfig(url, "items"), sink)
	testenv.Exec(t, url, `INSERT INTO items VALUES (1, 'a', 'b', 1, NULL)`)
	txns, _ := sink.waitFor(t, "the first transaction", func(tx []*change.Txn, _ []change.Event) bool { return len(tx) >= 1 })
	firstEnd := txns[0].EndLSN
	testenv.Exec(t, url, `INSERT INTO items VALUES (2, 'a', 'b', 1, NULL)`)
	// The refused transaction comes again after the restart, and only then is it confirmed.
	txns, _ = sink.waitFor(t, "the refused transaction, again", func(tx []*change.Txn, _ []change.Event) bool { return len(tx) >= 2 })
	if !refused.Load() {
		t.Fatal("the sink never refused")
	}
	if got := col(t, txns[1].Events[0].After, "id"); got != "2" {
		t.Fatalf("second accepted id = %s, want 2", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for queryLSN(t, url, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE database = current_database()`) < txns[1].EndLSN {
		if time.Now().After(deadline) {
			t.Fatalf("slot never confirmed %s (first end %s)", txns[1].EndLSN, firstEnd)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestIdlePublicationStillAdvancesTheSlot(t *testing.T) {
	url := db(t, itemsTable, `CREATE TABLE unpublished (id int PRIMARY KEY)`)
	start(t, testConfig(url, "items"), newCollector())
	// WAL moves on tables nobody streams; the slot must not pin it.
	testenv.Exec(t, url, `INSERT INTO unpublished SELECT generate_series(1, 1000)`)
	target := queryLSN(t, url, `SELECT pg_current_wal_lsn()::text`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		confirmed := queryLSN(t, url, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE database = current_database()`)
		if confirmed >= target {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot confirmed %s, never reached the WAL position %s written since", confirmed, target)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestLeadershipStandbyTakesOver(t *testing.T) {
	url := db(t, itemsTable)
	leaderSink, standbySink := newCollector(), newCollector()
	cfg := testConfig(url, "items")
	leader := start(t, cfg, leaderSink)

	f, err := New(logTo(t, cfg), standbySink)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	testenv.Exec(t, url, `INSERT INTO items VALUES (1, 'a', 'b', 1, NULL)`)
	leaderSink.waitEvents(t, 1)
	time.Sleep(300 * time.Millisecond) // several lock polls
	if st := f.Stats(); st.Leader || st.Streaming {
		t.Fatalf("standby stats %+v: it must not lead while the leader lives", st)
	}
	if _, ev := standbySink.snapshot(); len(ev) != 0 {
		t.Fatalf("standby received %d events while the leader lived", len(ev))
	}
	// The leader dies; its session ends, the lock with it.
	if err := leader.halt(t); err != nil {
		t.Fatal(err)
	}
	took := time.Now()
	testenv.Exec(t, url, `INSERT INTO items VALUES (2, 'a', 'b', 1, NULL)`)
	events := standbySink.waitEvents(t, 1)
	if got := col(t, events[len(events)-1].After, "id"); got != "2" {
		t.Errorf("standby's last event id = %s, want 2", got)
	}
	if !f.Stats().Leader {
		t.Error("standby did not report leading after taking over")
	}
	t.Logf("takeover and first event in %s", time.Since(took).Round(time.Millisecond))
}

func TestPermanentErrorEndsRunWithoutLooping(t *testing.T) {
	url := db(t, `CREATE TABLE nopk (v int)`)
	var ends atomic.Int32
	cfg := testConfig(url, "nopk")
	cfg.OnEnd = func(error) { ends.Add(1) }
	f, err := New(logTo(t, cfg), newCollector())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = f.Run(ctx)
	var fe *Error
	if !errors.As(err, &fe) || !fe.Permanent || fe.Stage != StagePreflight {
		t.Fatalf("Run = %v, want a permanent preflight error", err)
	}
	if !strings.Contains(fe.Fix, "REPLICA IDENTITY FULL") || !strings.Contains(fe.Fix, "primary key") {
		t.Errorf("fix %q does not say how to give the table an identity", fe.Fix)
	}
	if n := ends.Load(); n != 1 {
		t.Errorf("OnEnd called %d times, want once", n)
	}
	if st := f.Stats(); st.Failure == "" || st.Restarts != 0 {
		t.Errorf("stats %+v, want the failure recorded and no restart", st)
	}
}

func TestSlowSinkIsNotMistakenForASilentServer(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	var slowed atomic.Bool
	sink.refuse = func(*change.Txn) error {
		if !slowed.Swap(true) {
			time.Sleep(3 * time.Second) // longer than the 2s silence timeout
		}
		return nil
	}
	var ends atomic.Int32
	cfg := testConfig(url, "items")
	cfg.QueueTxns = 1
	cfg.OnEnd = func(err error) { ends.Add(1); t.Logf("stream ended: %v", err) }
	start(t, cfg, sink)
	for i := 1; i <= 4; i++ {
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items VALUES (%d, 'a', 'b', 1, NULL)`, i))
	}
	events := sink.waitEvents(t, 4)
	if n := ends.Load(); n != 0 {
		t.Errorf("the stream ended %d times while only the sink was slow", n)
	}
	if len(events) != 4 {
		t.Errorf("got %d events, want 4", len(events))
	}
}
