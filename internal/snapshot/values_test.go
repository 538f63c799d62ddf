package snapshot

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/testenv"
)

// valuesTable has a column of every kind of type the changefeed converts differently, and
// valuesRows rows that reach each conversion's edges: the snapshot must give every value the
// stream gives for the same row, byte for byte.
var valuesTable = []string{
	`CREATE TYPE mood AS ENUM ('sad', 'happy')`,
	`CREATE DOMAIN posint AS int CHECK (VALUE > 0)`,
	`CREATE DOMAIN small_posint AS posint CHECK (VALUE < 1000)`,
	`CREATE TABLE vals (
		id bigint PRIMARY KEY,
		i2 smallint, i4 int, i8 bigint, n numeric, n2 numeric(12,2), f4 real, f8 double precision,
		t text, vc varchar(20), ch char(6), nm name, b bool,
		ts timestamptz, tsl timestamp, d date, tm time, tmz timetz, iv interval,
		j json, jb jsonb, by bytea, u uuid, ip inet, cidr cidr, mac macaddr, mo money,
		ia int[], ta text[], fa float8[], ba bool[], ja jsonb[], ma int[][], tsa timestamptz[],
		m mood, dom posint, dom2 small_posint, r int4range, pt point, xml xml, bits bit varying(8)
	)`,
}

var valuesRows = []string{
	`INSERT INTO vals (id) VALUES (1)`, // every other column NULL
	`INSERT INTO vals VALUES (2,
		-32768, -2147483648, 9007199254740992, 0.1, 1.10, 1.5e-07, -0,
		'héllo ✓ 𝄞 "quoted" back\slash' || E'\n\ttab\x01', 'varchar', 'ab', 'name', true,
		'2024-01-06 14:00:00.123456+05:45', '2024-01-06 14:00:00.9999', '2024-01-06', '23:59:59.999999', '12:00+03', '1 year 2 mons 3 days 04:05:06.7',
		'{"a": [1, 2.50], "b" :  null}', '{"b": null, "a": [1, 2.50], "c": "ü"}', '\x000aff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', 12.34,
		'{1,NULL,3}', '{"a","NULL",NULL,"with \"quote\"","x,y"}', '{1.5,NaN,-Infinity}', '{t,f}', ARRAY['{"x":1}'::jsonb, 'null'::jsonb, NULL], '{{1,2},{3,4}}', '{"2024-01-06 14:00:00+00",infinity}',
		'happy', 7, 8, '[1,10)', '(1.5,2)', '<a>b</a>', B'1010')`,
	`INSERT INTO vals VALUES (3,
		32767, 2147483647, 9007199254740993, 'NaN', -0.00, 'Infinity', 'NaN',
		'', '', '', '', false,
		'infinity', '-infinity', '4713-01-01 BC', '00:00', '00:00:00-12:30', '-1 days +02:00:00',
		'[]', '{}', '\x', '00000000-0000-0000-0000-000000000000', '::1', '::/0', 'ff:ff:ff:ff:ff:ff', -0.01,
		'{}', '{}', '{}', '{}', '{}', '{}', '{}',
		'sad', 1, 1, 'empty', '(0,0)', '', B'')`,
	`INSERT INTO vals VALUES (4,
		0, 0, -9007199254740993, 0.1000000000000000055, 99999999.99, 3.4028235e38, 1e308,
		repeat('long ', 5000), 'x', 'abcdef', 'n', NULL,
		'1900-01-01 00:00:00+00', '10000-01-01 00:00:00', '10000-01-01', '24:00:00', NULL, '-178000000 years',
		'"just a string"', '12.5', NULL, NULL, '192.168.0.1/24', NULL, NULL, NULL,
		'{{{1}}}', NULL, NULL, NULL, NULL, '[0:1]={7,8}', NULL,
		NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
}

// valueColumns reads the columns of vals as the changefeed types them: a domain as the
// built-in under it (it announces the domain with its base type's name), anything else by
// its own OID.
func valueColumns(t *testing.T, url string) []Column {
	t.Helper()
	ctx := ctxFor(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `
		WITH RECURSIVE chain(attnum, typ) AS (
			SELECT attnum, atttypid FROM pg_attribute WHERE attrelid = 'vals'::regclass AND attnum > 0 AND NOT attisdropped
			UNION ALL SELECT c.attnum, t.typbasetype FROM chain c JOIN pg_type t ON t.oid = c.typ WHERE t.typbasetype <> 0)
		SELECT a.attname::text, (SELECT c.typ FROM chain c JOIN pg_type t ON t.oid = c.typ WHERE c.attnum = a.attnum AND t.typbasetype = 0)::int8
		FROM pg_attribute a WHERE attrelid = 'vals'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
	if err != nil {
		t.Fatal(err)
	}
	var cols []Column
	for rows.Next() {
		var name string
		var oid int64
		if err := rows.Scan(&name, &oid); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, Column{Name: name, OID: uint32(oid)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols
}

// streamed collects the changefeed's inserts and messages.
type streamed struct {
	mu       sync.Mutex
	rows     map[string]change.Row // guarded by mu: the After row of each insert, by id
	messages []change.Event        // guarded by mu
}

func (s *streamed) Accept(_ context.Context, txn *change.Txn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range txn.Events {
		switch e.Op {
		case change.Insert:
			id, _ := e.After.Get("id")
			s.rows[string(id)] = e.After
		case change.Message:
			s.messages = append(s.messages, e)
		}
	}
	return nil
}

// TestValuesMatchTheChangefeed inserts rows while a changefeed streams the table, then reads
// them as a snapshot through a pool whose sessions format values every other way: each row
// must be, byte for byte, the row the stream delivered. Then a fence reaches the stream.
func TestValuesMatchTheChangefeed(t *testing.T) {
	url := db(t, valuesTable...)
	sink := &streamed{rows: map[string]change.Row{}}
	feed, err := changefeed.New(changefeed.Config{
		DatabaseURL: url, Slot: testenv.SlotName(t, url), Tables: []string{"public.vals"},
		MessagePrefixes: []string{FencePrefix},
		StatusInterval:  200 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	feedCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- feed.Run(feedCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("feed: %v", err)
		}
	}()
	waitUntil(t, "the changefeed streams", func() bool { return feed.Stats().Streaming })
	testenv.Exec(t, url, valuesRows...)
	waitUntil(t, "the inserts are streamed", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.rows) == len(valuesRows)
	})

	pool, _ := newPool(t, url, 2)
	r := New(pool, Config{PageRows: 3})
	rec := &recorder{}
	if _, err := r.Read(ctx, Request{Table: "public.vals", Columns: valueColumns(t, url), Key: []string{"id"}}, rec); err != nil {
		t.Fatal(err)
	}
	got := rec.rows()
	if len(got) != len(valuesRows) {
		t.Fatalf("the snapshot has %d rows, want %d", len(got), len(valuesRows))
	}
	sink.mu.Lock()
	for _, row := range got {
		id, _ := row.Get("id")
		want := sink.rows[string(id)]
		if diff := cmp.Diff(rowStrings(want), rowStrings(row)); diff != "" {
			t.Errorf("row %s: stream (-) and snapshot (+) differ:\n%s", id, diff)
		}
		if !json.Valid(row.AppendJSON(nil)) {
			t.Errorf("row %s is not valid JSON: %s", id, row.AppendJSON(nil))
		}
	}
	sink.mu.Unlock()

	// The fence reaches the stream, with the id it was given.
	lsn, err := r.Fence(ctx, "values-test")
	if err != nil {
		t.Fatal(err)
	}
	if lsn == 0 {
		t.Fatal("Fence returned LSN 0")
	}
	waitUntil(t, "the fence is streamed", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, m := range sink.messages {
			if m.Prefix == FencePrefix && m.Content == "values-test" {
				return true
			}
		}
		return false
	})
}

// rowStrings shows a row as name=value lines, for a readable diff.
func rowStrings(r change.Row) []string {
	out := make([]string, len(r))
	for i, c := range r {
		v := string(c.Value)
		if len(v) > 200 {
			v = v[:200] + "..."
		}
		out[i] = c.Name + "=" + strings.ReplaceAll(v, "\n", `\n`)
	}
	return out
}
