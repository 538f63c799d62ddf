package doctor

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/testenv"
)

// itemsTable has a primary key, so its replica identity DEFAULT logs the old row's id.
const itemsTable = `CREATE TABLE items (id bigint PRIMARY KEY, org_id text, qty int)`

// pgConf is the changefeed and policy part of a config file.
type pgConf struct {
	url, slot   string
	tables      []string
	full        []string
	rows        map[string]string // table -> row rule
	lagWarn     string
	publication string
}

func (p pgConf) yaml() string {
	var b strings.Builder
	b.WriteString("auth: {allow_anonymous: true}\nchangefeed:\n")
	fmt.Fprintf(&b, "  database_url: %s\n  slot: %s\n", strconv.Quote(p.url), p.slot)
	if len(p.tables) > 0 {
		fmt.Fprintf(&b, "  tables: [%s]\n", strings.Join(p.tables, ", "))
	}
	if len(p.full) > 0 {
		fmt.Fprintf(&b, "  full_identity_tables: [%s]\n", strings.Join(p.full, ", "))
	}
	if p.lagWarn != "" {
		fmt.Fprintf(&b, "  lag_warn_bytes: %s\n", p.lagWarn)
	}
	if p.publication != "" {
		fmt.Fprintf(&b, "  publication: %s\n", p.publication)
	}
	b.WriteString("policy:\n  channels:\n    \"**\": {subscribe: \"true\"}\n")
	if len(p.rows) > 0 {
		b.WriteString("  tables:\n")
		for table, row := range p.rows {
			fmt.Fprintf(&b, "    %s: {row: %s}\n", table, strconv.Quote(row))
		}
	}
	return b.String()
}

// database is a fresh database on the private Postgres with setup run in it, and the config of
// a changefeed streaming tables from it with a slot of its own.
func database(t *testing.T, tables []string, setup ...string) pgConf {
	t.Helper()
	u := testenv.NewDatabase(t)
	testenv.Exec(t, u, setup...)
	return pgConf{url: u, slot: testenv.SlotName(t, u), tables: tables}
}

// count runs a query returning one number.
func count(t *testing.T, u, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestPostgresHealthy is the baseline the other tests break: a database fit to stream from
// passes every check, and doctor leaves it as it found it.
func TestPostgresHealthy(t *testing.T) {
	p := database(t, []string{"items"}, itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
	p.rows = map[string]string{"public.items": "row.id > 0"}
	r := run(t, p.yaml(), nil)
	if r.Failed() || r.Count(Warn) > 0 {
		t.Fatalf("a healthy database: %s\n%s", r.Summary(), text(r))
	}
	for _, id := range []string{"postgres.connect", "postgres.tls", "postgres.version", "postgres.wal_level", "postgres.role",
		"postgres.sync_standby", "postgres.replication_slots", "postgres.wal_senders", "postgres.session", "postgres.encoding"} {
		want(t, r, id, "", OK)
	}
	want(t, r, "postgres.publication", "herald", OK)
	want(t, r, "postgres.table", "public.items", OK)
	want(t, r, "postgres.replica_identity", "public.items", OK)
	want(t, r, "postgres.slot", p.slot, OK)
	none(t, r, "postgres.slot_lag") // no slot yet
	if c := want(t, r, "config.policy", "public.items", OK); !strings.Contains(c.Detail, "compile against the 3 columns") {
		t.Errorf("config.policy detail %q, want the rules compiled against the table's 3 columns", c.Detail)
	}
}

// TestPostgresDoctorChangesNothing: a publication and a slot that herald serve would create
// are reported, and not created.
func TestPostgresDoctorChangesNothing(t *testing.T) {
	p := database(t, []string{"items"}, itemsTable)
	r := run(t, p.yaml(), nil)
	want(t, r, "postgres.publication", "herald", Warn, `CREATE PUBLICATION "herald" FOR TABLE "public"."items";`)
	want(t, r, "postgres.slot", p.slot, OK)
	want(t, r, "postgres.table", "public.items", OK)
	if r.Failed() {
		t.Errorf("nothing fails before herald serve's first start:\n%s", text(r))
	}
	if n := count(t, p.url, `SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`); n != 0 {
		t.Errorf("after doctor: %d publications and slots, want none", n)
	}
}

func TestPostgresTableMissingFromThePublication(t *testing.T) {
	p := database(t, []string{"items", "other"}, itemsTable, `CREATE TABLE other (id int PRIMARY KEY)`, `CREATE PUBLICATION herald FOR TABLE items`)
	r := run(t, p.yaml(), nil)
	want(t, r, "postgres.table", "public.other", Fail, `ALTER PUBLICATION "herald" ADD TABLE "public"."other";`)
	want(t, r, "postgres.table", "public.items", OK)
	if !r.Failed() {
		t.Error("the report did not fail")
	}

	testenv.Exec(t, p.url, `ALTER PUBLICATION herald ADD TABLE other`)
	want(t, run(t, p.yaml(), nil), "postgres.table", "public.other", OK)
}

func TestPostgresTableThatDoesNotExist(t *testing.T) {
	p := database(t, []string{"items", "nosuch"}, itemsTable)
	r := run(t, p.yaml(), nil)
	want(t, r, "postgres.table", "public.nosuch", Fail, "changefeed.tables")
	if got := r.Find("postgres.replica_identity", "public.nosuch"); len(got) != 0 {
		t.Errorf("postgres.replica_identity reported a table that does not exist: %+v", got)
	}
}

// TestPostgresReplicaIdentity: a table whose old rows must be whole (full_identity_tables, or a
// row rule that reads a column outside the key) under REPLICA IDENTITY DEFAULT fails, with the
// ALTER TABLE that fixes it; after it, the table passes.
func TestPostgresReplicaIdentity(t *testing.T) {
	const alter = `ALTER TABLE "public"."items" REPLICA IDENTITY FULL;`
	t.Run("full_identity_tables", func(t *testing.T) {
		p := database(t, []string{"items"}, itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
		p.full = []string{"items"}
		want(t, run(t, p.yaml(), nil), "postgres.replica_identity", "public.items", Fail, alter)
		testenv.Exec(t, p.url, `ALTER TABLE items REPLICA IDENTITY FULL`)
		want(t, run(t, p.yaml(), nil), "postgres.replica_identity", "public.items", OK)
	})
	t.Run("a row rule", func(t *testing.T) {
		p := database(t, []string{"items"}, itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
		p.rows = map[string]string{"public.items": "row.org_id == auth.org_id"}
		r := run(t, p.yaml(), nil)
		c := want(t, r, "postgres.replica_identity", "public.items", Fail, alter)
		if !strings.Contains(c.Detail, "org_id") || !strings.Contains(c.Detail, "DEFAULT") {
			t.Errorf("detail %q does not name the column and the identity", c.Detail)
		}
		want(t, r, "config.policy", "public.items", Fail, "REPLICA IDENTITY FULL")
		testenv.Exec(t, p.url, `ALTER TABLE items REPLICA IDENTITY FULL`)
		r = run(t, p.yaml(), nil)
		want(t, r, "postgres.replica_identity", "public.items", OK)
		want(t, r, "config.policy", "public.items", OK)
	})
	t.Run("full but not streamed", func(t *testing.T) {
		p := database(t, []string{"items"}, itemsTable, `CREATE TABLE other (id int PRIMARY KEY)`, `ALTER TABLE other REPLICA IDENTITY FULL`,
			`CREATE PUBLICATION herald FOR TABLE items`)
		p.full = []string{"other"}
		r := run(t, p.yaml(), nil)
		want(t, r, "postgres.replica_identity", "public.other", Fail, "changefeed.tables", "changefeed.full_identity_tables")
		if got := r.Find("postgres.table", "public.other"); len(got) != 0 {
			t.Errorf("postgres.table reported a table that does not stream: %+v", got)
		}
	})
	t.Run("no primary key", func(t *testing.T) {
		p := database(t, []string{"nopk"}, `CREATE TABLE nopk (id int, v text)`, `CREATE PUBLICATION herald FOR TABLE nopk`)
		want(t, run(t, p.yaml(), nil), "postgres.replica_identity", "public.nopk", Fail, "add a primary key", `ALTER TABLE "public"."nopk" REPLICA IDENTITY FULL;`)
	})
}

// TestPostgresInactiveSlotWithLag: a slot nothing streams from, behind the WAL by more than
// changefeed.lag_warn_bytes, warns with the way to resume or drop it; doctor neither moves nor
// takes the slot.
func TestPostgresInactiveSlotWithLag(t *testing.T) {
	p := database(t, []string{"items"}, itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
	testenv.Exec(t, p.url, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, p.slot),
		`INSERT INTO items SELECT g, 'acme', g FROM generate_series(1, 2000) g`)
	t.Cleanup(func() {
		testenv.Exec(t, testenv.PostgresURL(t), fmt.Sprintf(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '%s' AND NOT active`, p.slot))
	})
	confirmed := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, p.url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		var lsn string
		if err := c.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, p.slot).Scan(&lsn); err != nil {
			t.Fatalf("read the slot: %v", err)
		}
		return lsn
	}
	before := confirmed()

	p.lagWarn = "1KiB"
	r := run(t, p.yaml(), nil)
	if c := want(t, r, "postgres.slot", p.slot, OK); !strings.Contains(c.Detail, "inactive") {
		t.Errorf("postgres.slot detail %q does not say the slot is inactive", c.Detail)
	}
	c := want(t, r, "postgres.slot_lag", p.slot, Warn, "herald serve", fmt.Sprintf("SELECT pg_drop_replication_slot('%s');", p.slot))
	if !strings.Contains(c.Detail, "changefeed.lag_warn_bytes (1KiB)") {
		t.Errorf("detail %q does not name the threshold", c.Detail)
	}
	want(t, r, "postgres.replication_slots", "", OK)
	if r.Failed() {
		t.Errorf("a lagging slot alone failed the report:\n%s", text(r))
	}
	if after := confirmed(); after != before {
		t.Errorf("the slot's confirmed position moved from %s to %s under doctor", before, after)
	}

	p.lagWarn = "1GiB"
	want(t, run(t, p.yaml(), nil), "postgres.slot_lag", p.slot, OK)
}

// TestPostgresNotUTF8: a SQL_ASCII database cannot be streamed as UTF-8, and fails with how to
// move the data; a LATIN1 one is converted by the server, and passes.
func TestPostgresNotUTF8(t *testing.T) {
	for _, tt := range []struct {
		encoding string
		status   Status
		fix      []string
	}{
		{"SQL_ASCII", Fail, []string{"createdb --encoding=UTF8", "pg_dump", "changefeed.database_url"}},
		{"LATIN1", OK, nil},
	} {
		t.Run(tt.encoding, func(t *testing.T) {
			u := testenv.NewDatabaseWith(t, fmt.Sprintf("ENCODING '%s' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0", tt.encoding))
			testenv.Exec(t, u, itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
			p := pgConf{url: u, slot: testenv.SlotName(t, u), tables: []string{"items"}}
			c := want(t, run(t, p.yaml(), nil), "postgres.encoding", "", tt.status, tt.fix...)
			if !strings.Contains(c.Detail, tt.encoding) {
				t.Errorf("detail %q does not name the encoding", c.Detail)
			}
		})
	}
}

// TestPostgresWrongPassword: a refused login fails postgres.connect with the fix for the
// credentials and the key that holds them, shows no password, and checks nothing else there.
func TestPostgresWrongPassword(t *testing.T) {
	base := testenv.PostgresURL(t)
	// scripts/testenv's pg_hba makes this role log in with SCRAM; whatever its password, this is
	// not it.
	testenv.Exec(t, base, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_pw_scram') THEN CREATE ROLE herald_pw_scram LOGIN; END IF;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`)
	const password = "not-the-Password-7Qz"
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("herald_pw_scram", password)
	p := pgConf{url: u.String(), slot: "herald_doctor_pw", tables: []string{"items"}}
	r := run(t, p.yaml(), nil, password)
	c := want(t, r, "postgres.connect", "", Fail, "password in the database URL", "changefeed.database_url")
	if !strings.Contains(c.Detail, "28P01") {
		t.Errorf("detail %q does not carry the SQLSTATE of a failed password", c.Detail)
	}
	none(t, r, "postgres.version")
	none(t, r, "postgres.slot")
}

// TestPostgresNotThere: nothing listens at the URL's port.
func TestPostgresNotThere(t *testing.T) {
	const password = "pw-Closed-Port-91"
	p := pgConf{url: "postgres://herald:" + password + "@127.0.0.1:" + closedPort(t) + "/app?sslmode=disable", slot: "herald_doctor_x", tables: []string{"items"}}
	r := run(t, p.yaml(), nil, password)
	want(t, r, "postgres.connect", "", Fail, "reachable", "changefeed.database_url")
	none(t, r, "postgres.version")
	// The config is fine: config.policy is still reported, its table rules unchecked.
	want(t, r, "config.policy", "policy.channels", OK)
}

// TestPostgresWALLevelReplica runs a second private Postgres with wal_level = replica, which
// cannot decode logically.
func TestPostgresWALLevelReplica(t *testing.T) {
	s := testenv.OwnPostgres(t, map[string]string{"wal_level": "replica"})
	testenv.Exec(t, s.URL(), itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
	p := pgConf{url: s.URL(), slot: "herald", tables: []string{"items"}}
	r := run(t, p.yaml(), nil)
	c := want(t, r, "postgres.wal_level", "", Fail, "ALTER SYSTEM SET wal_level = logical", "restart Postgres")
	if !strings.Contains(c.Detail, `"replica"`) {
		t.Errorf("detail %q does not say what wal_level is", c.Detail)
	}
	// The other facts are still read and reported.
	want(t, r, "postgres.version", "", OK)
	want(t, r, "postgres.table", "public.items", OK)
}

// TestPostgresPasswordNeverShown runs doctor on database URLs holding a password, through every
// way its Postgres checks end: all well (the private server trusts loopback and ignores it), a
// server that is not there, a URL that does not parse, and a refused login (above).
func TestPostgresPasswordNeverShown(t *testing.T) {
	const password = "Pg-Secret-Never-Shown-42"
	base, err := url.Parse(testenv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, base.String(), itemsTable, `CREATE PUBLICATION herald FOR TABLE items`)
	withPassword := *base
	withPassword.User = url.UserPassword("postgres", password)
	for name, u := range map[string]string{
		"all well":          withPassword.String(),
		"not there":         "postgres://postgres:" + password + "@127.0.0.1:" + closedPort(t) + "/app?sslmode=disable",
		"malformed":         "postgres://postgres:" + password + "%zz@127.0.0.1:5432/app?sslmode=disable",
		"key=value":         "host=127.0.0.1 port=" + closedPort(t) + " user=postgres password=" + password + " dbname=app sslmode=disable",
		"a password option": base.String() + "&password=" + password,
	} {
		t.Run(name, func(t *testing.T) {
			p := pgConf{url: u, slot: testenv.SlotName(t, base.String()), tables: []string{"items"}}
			r := run(t, p.yaml(), nil, password)
			if name == "all well" && r.Failed() {
				t.Errorf("all well failed:\n%s", text(r))
			}
			if name == "malformed" {
				want(t, r, "config.values", "changefeed.database_url", Fail, "percent-encode the password")
			}
		})
	}
}

// TestPostgresPrepared runs a Postgres of its own that allows two-phase commit: a transaction
// prepared in Herald's database is read with its gid and owner, and counted; one prepared in
// another database is not. (Its warning, for one older than preparedWarnAge, is
// TestPreparedRule's.)
func TestPostgresPrepared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testenv.OwnPostgres(t, map[string]string{"max_prepared_transactions": "4"})
	testenv.Exec(t, s.URL(), itemsTable, `CREATE PUBLICATION herald FOR TABLE items`, `CREATE DATABASE elsewhere`)
	p := pgConf{url: s.URL(), slot: "herald", tables: []string{"items"}}
	if c := want(t, run(t, p.yaml(), nil), "postgres.prepared_xacts", "", OK); !strings.Contains(c.Detail, "no transaction is prepared") {
		t.Errorf("with none prepared: %q", c.Detail)
	}

	elsewhere, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	elsewhere.Path = "/elsewhere"
	testenv.Exec(t, elsewhere.String(), `CREATE TABLE w (id int)`, `BEGIN`, `INSERT INTO w VALUES (1)`, `PREPARE TRANSACTION 'there'`)
	testenv.Exec(t, s.URL(), `BEGIN`, `INSERT INTO items VALUES (1, 'acme', 1)`, `PREPARE TRANSACTION 'here'`)
	t.Cleanup(func() {
		testenv.Exec(t, s.URL(), `ROLLBACK PREPARED 'here'`)
		testenv.Exec(t, elsewhere.String(), `ROLLBACK PREPARED 'there'`)
	})

	c := want(t, run(t, p.yaml(), nil), "postgres.prepared_xacts", "", OK)
	if !strings.Contains(c.Detail, "1 transaction is prepared") {
		t.Errorf("detail %q, want the one prepared in Herald's database alone", c.Detail)
	}
	in, err := changefeed.Inspect(ctx, changefeed.Config{DatabaseURL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	got, err := in.Prepared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GID != "here" || got[0].Owner != "postgres" || got[0].Age < 0 || got[0].Age > time.Minute {
		t.Errorf("Prepared() = %+v, want the one named here, owned by postgres, just prepared", got)
	}
}
