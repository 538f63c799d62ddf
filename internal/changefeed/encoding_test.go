package changefeed

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
)

// utf8Writer is url with client_encoding pinned to UTF8, so the test's own SQL, written in Go's
// UTF-8, means what it says in a database of any encoding.
func utf8Writer(url string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "client_encoding=UTF8"
}

// latin1Table has a non-ASCII column name and values whose characters LATIN1 holds.
const latin1Table = `CREATE TABLE items (id int PRIMARY KEY, "größe" text, doc jsonb, tags text[])`

const latin1Insert = `INSERT INTO items VALUES (1, 'café straße', '{"wörter": "é ß", "n": 1}', '{é,ß}')`

const latin1After = `{"id":1,"größe":"café straße","doc":{"n": 1, "wörter": "é ß"},"tags":["é","ß"]}`

// TestLatin1DatabaseArrivesExact streams from a database whose encoding is LATIN1. Postgres
// converts the text pgoutput sends to the session's client_encoding, which defaults to the
// database's: unless Herald asks for UTF8, é arrives as the byte 0xE9, which is not UTF-8.
func TestLatin1DatabaseArrivesExact(t *testing.T) {
	url := testenv.NewDatabaseWith(t, "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	writer := utf8Writer(url)
	testenv.Exec(t, writer, latin1Table)
	sink := newCollector()
	cfg := testConfig(url, "public.items")
	cfg.MessagePrefixes = []string{"app"}
	start(t, cfg, sink)

	testenv.Exec(t, writer,
		`BEGIN; SELECT pg_logical_emit_message(true, 'herald.write', 'tag-é'); `+latin1Insert+`; COMMIT`,
		`SELECT pg_logical_emit_message(false, 'app', 'note-ß')`,
	)
	// The test wrote what it meant: é and ß are one byte each in LATIN1.
	var n int
	if err := connect(t, writer).QueryRow(context.Background(), `SELECT octet_length("größe") FROM items`).Scan(&n); err != nil || n != len("cafe strase") {
		t.Fatalf("octet_length = %d, %v; want %d: the test's insert was converted wrongly", n, err, len("cafe strase"))
	}
	events := sink.waitEvents(t, 2)
	if got := string(events[0].After.AppendJSON(nil)); got != latin1After {
		t.Errorf("after = %s, want %s", got, latin1After)
	}
	if events[0].WriteTag != "tag-é" {
		t.Errorf("write tag = %q, want %q", events[0].WriteTag, "tag-é")
	}
	if events[1].Prefix != "app" || events[1].Content != "note-ß" {
		t.Errorf("message = %q %q, want %q %q", events[1].Prefix, events[1].Content, "app", "note-ß")
	}

	// The ordinary (catalog) connection is pinned too.
	cc, err := ConnConfig(url, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := query(ctx, conn, `SELECT attname FROM pg_attribute WHERE attrelid = 'items'::regclass AND attnum = 2`)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || string(rows[0][0]) != "größe" {
		t.Errorf("catalog column name = %q, want %q", rows, "größe")
	}
}

// TestRoleClientEncodingIsOverridden streams as a role that sets client_encoding LATIN1. A
// character LATIN1 cannot hold (€) makes the walsender fail the conversion, and a stream that
// restarts into the same change fails the same way for ever.
func TestRoleClientEncodingIsOverridden(t *testing.T) {
	url := db(t, latin1Table, `CREATE PUBLICATION herald FOR TABLE items`)
	const role = "herald_enc_latin1"
	testenv.Exec(t, url,
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+role+`') THEN CREATE ROLE `+role+` LOGIN REPLICATION; END IF; END $$`,
		`ALTER ROLE `+role+` IN DATABASE `+dbName(t, url)+` SET client_encoding = 'LATIN1'`,
	)
	roleURL := strings.Replace(url, "postgres@", role+"@", 1)
	sink := newCollector()
	start(t, testConfig(roleURL, "public.items"), sink)

	testenv.Exec(t, url, `INSERT INTO items VALUES (1, '€ café', '{"€": "ß"}', '{€}')`, `INSERT INTO items VALUES (2, 'after', NULL, NULL)`)
	events := sink.waitEvents(t, 2)
	for i, want := range []string{
		`{"id":1,"größe":"€ café","doc":{"€": "ß"},"tags":["€"]}`,
		`{"id":2,"größe":"after","doc":null,"tags":null}`,
	} {
		if got := string(events[i].After.AppendJSON(nil)); got != want {
			t.Errorf("event %d after = %s, want %s", i, got, want)
		}
	}
}

func TestMessageTextDecodesTheServerEncoding(t *testing.T) {
	tests := []struct {
		encoding string
		in       []byte
		want     string
	}{
		{"UTF8", []byte("café €"), "café €"},
		{"LATIN1", []byte("caf\xe9 stra\xdfe"), "café straße"},
		{"LATIN9", []byte("\xa4"), "€"},
		{"WIN1252", []byte("\x80 \xe9"), "€ é"},
		{"KOI8R", []byte("\xd0\xd2\xc9\xd7\xc5\xd4"), "привет"},
		{"EUC_JP", []byte("\xc6\xfc\xcb\xdc"), "日本"},
		// No encoding to convert from: the bytes are passed on as they are.
		{"SQL_ASCII", []byte("caf\xe9"), "caf\xe9"},
		{"", []byte("plain"), "plain"},
	}
	for _, tt := range tests {
		t.Run(tt.encoding, func(t *testing.T) {
			if got := messageText(tt.encoding)(tt.in); got != tt.want {
				t.Errorf("messageText(%q)(%q) = %q, want %q", tt.encoding, tt.in, got, tt.want)
			}
		})
	}
}
