package changefeed

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/jackc/pgx/v5/pgconn"
)

// Inspector reads what preflight checks of a database, fact by fact, and changes nothing: it
// is `herald doctor`'s view of the changefeed's database, where preflight stops at the first
// fact that is wrong and then creates what is missing. Every judgement it hands back is made by
// the function preflight uses, so the two cannot disagree.
//
// Its connection is an ordinary one, not a replication connection (which would take one of
// the server's WAL senders), with the session settings every Herald connection pins, and
// default_transaction_read_only on: no statement it sends can write. Not safe for concurrent
// use.
type Inspector struct {
	conn    *pgconn.PgConn
	cfg     Config // with defaults
	sslMode string // as the operator wrote it; "" for none
}

// Inspect connects to cfg.DatabaseURL to read the facts preflight checks. Errors are *Error,
// with the fix for a refused login or an unreachable server, and never hold the password.
func Inspect(ctx context.Context, cfg Config) (*Inspector, error) {
	d := cfg.withDefaults()
	cc, err := ConnConfig(d.DatabaseURL, false)
	if err != nil {
		return nil, err
	}
	// Read-only by the session's default, so nothing this connection sends can write, whatever
	// the role may do.
	cc.RuntimeParams["default_transaction_read_only"] = "on"
	if cc.RuntimeParams["application_name"] == "herald" {
		cc.RuntimeParams["application_name"] = "herald doctor"
	}
	conn, err := pgconn.ConnectConfig(ctx, cc)
	if err != nil {
		if e := refusedAuth(err, d.DatabaseURL); e != nil {
			return nil, e
		}
		return nil, pgError(StageConnect, "connect", err)
	}
	return &Inspector{conn: conn, cfg: d, sslMode: sslModeOf(d.DatabaseURL)}, nil
}

// Close ends the connection.
func (in *Inspector) Close(ctx context.Context) error { return in.conn.Close(ctx) }

// Transport is how the inspector's connection travels, which is how the changefeed's does.
type Transport struct {
	// Addr is the server's address: host:port, or the Unix socket's path.
	Addr string
	// Local says the server is on this host: a Unix socket or a loopback address.
	Local bool
	// TLS says the connection is encrypted; Version names the protocol ("TLS 1.3").
	TLS     bool
	Version string
	// SSLMode is the sslmode of the database URL, or of PGSSLMODE; "" when neither names one
	// (libpq's default, prefer).
	SSLMode string
}

// Transport reports how the connection travels.
func (in *Inspector) Transport() Transport {
	nc := in.conn.Conn()
	t := Transport{SSLMode: in.sslMode}
	if addr := nc.RemoteAddr(); addr != nil {
		t.Addr = addr.String()
		if addr.Network() == "unix" {
			t.Local = true
		} else if host, _, err := net.SplitHostPort(t.Addr); err == nil {
			ip := net.ParseIP(host)
			t.Local = ip != nil && ip.IsLoopback()
		}
	}
	if tc, ok := nc.(*tls.Conn); ok {
		t.TLS = true
		t.Version = tls.VersionName(tc.ConnectionState().Version)
	}
	return t
}

// Settings reads the server-wide facts streaming depends on.
func (in *Inspector) Settings(ctx context.Context) (Settings, error) {
	return readSettings(ctx, in.conn)
}

// Publication is the configured publication as the catalog has it.
type Publication struct {
	// Name is the publication's name (changefeed.publication).
	Name string
	// Exists says it exists. A feed with tables configured creates it at start.
	Exists bool
	// Tables are the tables it covers, schema.table, sorted.
	Tables []string

	p   publication
	cfg *Config // nil in a Publication not read by an Inspector
}

// Publication reads the configured publication.
func (in *Inspector) Publication(ctx context.Context) (Publication, error) {
	p, err := readPublication(ctx, in.conn, in.cfg.Publication)
	if err != nil {
		return Publication{}, err
	}
	out := Publication{Name: p.name, Exists: p.exists, p: p, cfg: &in.cfg}
	for t := range p.tables {
		out.Tables = append(out.Tables, t)
	}
	slices.Sort(out.Tables)
	return out, nil
}

// Check refuses what preflight refuses of the publication as a whole: one that does not
// exist when no tables are configured to create it for, and one that leaves a kind of change
// out (insert, update, delete, truncate). A publication that does not exist, with tables
// configured, passes: the feed creates it at start. Errors are *Error.
func (p Publication) Check() error {
	if p.cfg == nil {
		return nil
	}
	if !p.Exists {
		if len(p.cfg.Tables) == 0 {
			return missingPublication(p.Name)
		}
		return nil
	}
	if e := p.p.checkActions(); e != nil {
		return e
	}
	return nil
}

// CheckCovers refuses a publication that exists and does not cover table. Errors are *Error.
func (p Publication) CheckCovers(table string) error {
	if !p.Exists {
		return nil
	}
	if e := p.p.checkCovers([]string{table}); e != nil {
		return e
	}
	return nil
}

// Table is a table the feed streams, as the catalog has it.
type Table struct {
	// Name is schema.table.
	Name string
	// Exists says the table exists.
	Exists bool
	// Identity is its replica identity as ALTER TABLE spells it: DEFAULT, USING INDEX, FULL or
	// NOTHING. Empty when the table does not exist.
	Identity string
	// Full says the table must be REPLICA IDENTITY FULL (changefeed.full_identity_tables).
	Full bool
	// Streams says the feed streams the table: it is configured (changefeed.tables), or with
	// none configured, the publication covers it. A table of full_identity_tables may not.
	Streams bool

	t pubTable
}

// Tables reads every table the feed streams: the configured ones, or with none configured
// every table of the publication (none when it does not exist); then any table of
// changefeed.full_identity_tables that is neither.
func (in *Inspector) Tables(ctx context.Context, pub Publication) ([]Table, error) {
	names := in.cfg.Tables
	if len(names) == 0 {
		names = pub.Tables
	}
	for _, t := range in.cfg.FullIdentityTables {
		if !slices.Contains(names, t) {
			names = append(slices.Clip(names), t)
		}
	}
	byName, err := readTables(ctx, in.conn, names)
	if err != nil {
		return nil, err
	}
	out := make([]Table, 0, len(names))
	for _, name := range names {
		t, ok := byName[name]
		out = append(out, Table{Name: name, Exists: ok, Identity: identityName(t.identity),
			Full: slices.Contains(in.cfg.FullIdentityTables, name), Streams: in.streams(name, pub), t: t})
	}
	return out, nil
}

// streams reports whether table is one the feed streams: configured, or with none configured,
// covered by the publication.
func (in *Inspector) streams(table string, pub Publication) bool {
	if len(in.cfg.Tables) > 0 {
		return slices.Contains(in.cfg.Tables, table)
	}
	return slices.Contains(pub.Tables, table)
}

// CheckExists refuses a table that does not exist. Errors are *Error.
func (t Table) CheckExists() error {
	if t.Exists {
		return nil
	}
	return noSuchTable(t.Name)
}

// CheckIdentity refuses a replica identity preflight refuses: not FULL where the table must
// be, or none at all; and a table that must be FULL that the feed does not stream. Errors are
// *Error.
func (t Table) CheckIdentity() error {
	if t.Full && !t.Streams {
		return fullNotStreamed(t.Name)
	}
	if !t.Exists {
		return nil
	}
	if e := identityError(t.t, t.Full); e != nil {
		return e
	}
	return nil
}

func identityName(relreplident byte) string {
	switch relreplident {
	case 'd':
		return "DEFAULT"
	case 'i':
		return "USING INDEX"
	case 'f':
		return "FULL"
	case 'n':
		return "NOTHING"
	}
	return ""
}

// Slot is the configured replication slot as pg_replication_slots has it.
type Slot struct {
	// Name is the slot's name (changefeed.slot).
	Name string
	// Exists says it exists. The feed creates it at start.
	Exists bool
	// Active says a backend streams from it now, ActivePID which.
	Active    bool
	ActivePID string
	// WALStatus is reserved, extended, unreserved or lost (pg_replication_slots.wal_status).
	WALStatus string
	// Confirmed is the position the slot's consumer confirmed (confirmed_flush_lsn); WALEnd is
	// how far the server's WAL reached when it was read.
	Confirmed, WALEnd change.LSN
	// SafeWALSize is how many more bytes of WAL may be written before the slot is in danger of
	// being lost (max_slot_wal_keep_size); -1 when unlimited.
	SafeWALSize int64

	s        slotState
	cfg      *Config
	database string
}

// LagBytes is how much WAL the slot holds back: from its confirmed position to the end of the
// WAL. Zero when the slot does not exist, or its consumer is caught up.
func (s Slot) LagBytes() uint64 {
	if !s.Exists || s.Confirmed == 0 || s.WALEnd <= s.Confirmed {
		return 0
	}
	return uint64(s.WALEnd - s.Confirmed)
}

// Slot reads the configured slot. database is the database the feed streams
// (Settings.Database), which the slot must belong to.
func (in *Inspector) Slot(ctx context.Context, database string) (Slot, error) {
	s, err := readSlot(ctx, in.conn, in.cfg.Slot)
	if err != nil {
		return Slot{}, err
	}
	return Slot{Name: in.cfg.Slot, Exists: s.exists, Active: s.active, ActivePID: s.activePID, WALStatus: s.walStatus,
		Confirmed: s.confirmed, WALEnd: s.walEnd, SafeWALSize: s.safeWALSize, s: s, cfg: &in.cfg, database: database}, nil
}

// Prepared is a transaction prepared for two-phase commit (PREPARE TRANSACTION) in the
// database, and not yet committed or rolled back (COMMIT PREPARED, ROLLBACK PREPARED). Until
// it is, logical decoding holds it as running: the slot's restart point cannot pass its start,
// so the server keeps the WAL from there, and its changes reach no client.
type Prepared struct {
	// GID is the name it was prepared under, what COMMIT PREPARED takes.
	GID string
	// Owner is the role that prepared it.
	Owner string
	// Age is how long ago it was prepared, by the server's clock.
	Age time.Duration
}

// preparedSQL lists the database's prepared transactions, oldest first. pg_prepared_xacts is
// readable by every role.
const preparedSQL = `SELECT gid, owner::text, extract(epoch FROM now() - prepared)::float8
  FROM pg_catalog.pg_prepared_xacts WHERE database = current_database() ORDER BY prepared`

// Prepared reads the database's prepared transactions, oldest first.
func (in *Inspector) Prepared(ctx context.Context) ([]Prepared, error) {
	rows, err := query(ctx, in.conn, preparedSQL)
	if err != nil {
		return nil, pgError(StagePreflight, "read prepared transactions", err)
	}
	out := make([]Prepared, 0, len(rows))
	for _, r := range rows {
		secs, _ := strconv.ParseFloat(string(r[2]), 64)
		out = append(out, Prepared{GID: string(r[0]), Owner: string(r[1]), Age: time.Duration(secs * float64(time.Second))})
	}
	return out, nil
}

// Check refuses a slot no feed can stream from: of another kind or database, lost, or decoding
// two-phase. A slot that does not exist passes (the feed creates it), and so does an active
// one: it is most often Herald's own stream. Errors are *Error.
func (s Slot) Check() error {
	if !s.Exists || s.cfg == nil {
		return nil
	}
	if e := slotUnusable(s.s, s.cfg, s.database); e != nil {
		return e
	}
	return nil
}

// PinnedSettings are the session settings every Herald connection sends at connect, as
// name=value, sorted.
func PinnedSettings() []string {
	out := make([]string, 0, len(pinnedSettings))
	for k, v := range pinnedSettings {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// CheckSession refuses a connection on which the settings Herald pins in the startup packet
// (see ConnConfig) do not hold: a connection pooler that drops startup parameters, or a server
// that refused one. The values the changefeed decodes are formatted by them. Errors are *Error.
func (in *Inspector) CheckSession(ctx context.Context) error {
	names := make([]string, 0, len(pinnedSettings))
	for k := range pinnedSettings {
		names = append(names, k)
	}
	slices.Sort(names)
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = quoteLiteral(n)
	}
	rows, err := query(ctx, in.conn, `SELECT lower(name), setting FROM pg_settings WHERE lower(name) IN (`+strings.Join(quoted, ", ")+`)`)
	if err != nil {
		return pgError(StagePreflight, "read the session settings", err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[string(r[0])] = string(r[1])
	}
	var wrong []string
	for _, n := range names {
		want, have := pinnedSettings[n], got[n]
		// DateStyle holds the output style and the field order ("ISO, MDY"): only the style is pinned.
		if n == "datestyle" {
			have, _, _ = strings.Cut(have, ",")
		}
		if !strings.EqualFold(strings.TrimSpace(have), want) {
			wrong = append(wrong, fmt.Sprintf("%s is %q, not %q", n, got[n], want))
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	return &Error{Stage: StagePreflight, Permanent: true,
		Detail: "the session settings Herald sends at connect did not hold: " + strings.Join(wrong, "; ") +
			"; the values the changefeed decodes would be formatted otherwise",
		Fix: "connect to Postgres directly, not through a pooler that drops startup parameters (PgBouncer: add them to ignore_startup_parameters only if it then sets them), in changefeed.database_url"}
}

// CheckEncoding refuses a database whose text cannot be turned into UTF-8. Every encoding but
// SQL_ASCII is converted by the server to the client_encoding Herald pins (UTF8); SQL_ASCII is
// no encoding at all, so its bytes arrive as they were written, and a value that is not UTF-8
// would reach clients as such. Errors are *Error.
func CheckEncoding(serverEncoding string) error {
	if serverEncoding != "SQL_ASCII" {
		return nil
	}
	return &Error{Stage: StagePreflight, Permanent: true,
		Detail: "the database's encoding is SQL_ASCII, which is no encoding: Postgres converts none of its text, so a value that is not UTF-8 would reach clients as it was written",
		Fix: "move the data to a UTF8 database: createdb --encoding=UTF8 --template=template0 <new>; " +
			"pg_dump <old> | psql <new> (converting the text to UTF-8 on the way, e.g. with iconv, if it is not ASCII); then point changefeed.database_url at it"}
}

// MessageEncodingConverted reports whether the logical messages of a database of
// serverEncoding reach clients as UTF-8. Values and names are always converted by the server;
// a message's content is the emitting function's bytes, which the changefeed converts itself
// from the encodings it knows.
func MessageEncodingConverted(serverEncoding string) bool {
	if serverEncoding == "UTF8" || serverEncoding == "SQL_ASCII" {
		return true
	}
	_, ok := serverEncodings[serverEncoding]
	return ok
}

// Column is a published column of a table, with the type OID its values decode as (a domain's
// base type).
type Column struct {
	Name string
	OID  uint32
}

// TableShape is a table as a publication streams it: what policy rules and filters compile
// against.
type TableShape struct {
	// Columns are the published columns in table order. None: the table does not exist, or the
	// publication does not cover it.
	Columns []Column
	// Key names the replica identity's columns, in table order: the identity index's under
	// USING INDEX, else the primary key's.
	Key []string
	// Identity is the replica identity as ALTER TABLE spells it (see Table.Identity).
	Identity string
}

// shapeQuery lists a table's columns as the publication %[2]s streams it, one row each in
// table order: the replica identity, the name, the type OID (a domain's base type), whether
// the column is in the replica identity's key (the identity index's columns, else the primary
// key's), and whether the publication publishes it. Postgres 15 and later can publish a subset
// of a table's columns (pg_publication_tables.attnames; %[3]s is that, or NULL before 15).
// It returns no row for a table that does not exist or that the publication does not cover.
const shapeQuery = `
WITH rel AS (
	SELECT c.oid, c.relreplident, pt.cols
	FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace
	JOIN LATERAL (SELECT %[3]s AS cols FROM pg_publication_tables p
		WHERE p.pubname = %[2]s AND p.schemaname = n.nspname AND p.tablename = c.relname LIMIT 1) pt ON true
	WHERE c.oid = to_regclass(%[1]s)
)
SELECT rel.relreplident::text, a.attname::text,
	(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END)::oid::text,
	EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = rel.oid AND a.attnum = ANY (i.indkey)
		AND CASE WHEN rel.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END),
	rel.cols IS NULL OR a.attname = ANY (rel.cols)
FROM rel
JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
ORDER BY a.attnum`

// DescribeTable reads table (schema.table) as publication streams it, over conn; a TableShape
// without columns when the table does not exist or the publication does not cover it. It only
// reads.
func DescribeTable(ctx context.Context, conn *pgconn.PgConn, publication, table string) (TableShape, error) {
	cols := "NULL::name[]"
	if major(conn.ParameterStatus("server_version")) >= 15 {
		cols = "p.attnames"
	}
	sql := fmt.Sprintf(shapeQuery, quoteLiteral(quoteTable(table)), quoteLiteral(publication), cols)
	rows, err := query(ctx, conn, sql)
	if err != nil {
		return TableShape{}, pgError(StagePublication, "describe table "+table, err)
	}
	var shape TableShape
	for _, r := range rows {
		if len(r) != 5 || len(r[0]) == 0 {
			return TableShape{}, &Error{Stage: StagePublication, Detail: "the table description query returned an unexpected shape"}
		}
		shape.Identity = identityName(r[0][0])
		name := string(r[1])
		if string(r[3]) == "t" {
			shape.Key = append(shape.Key, name)
		}
		if string(r[4]) != "t" {
			continue
		}
		oid, err := strconv.ParseUint(string(r[2]), 10, 32)
		if err != nil {
			return TableShape{}, &Error{Stage: StagePublication, Detail: fmt.Sprintf("column %s of %s has the type OID %q", name, table, r[2])}
		}
		shape.Columns = append(shape.Columns, Column{Name: name, OID: uint32(oid)})
	}
	return shape, nil
}

// DescribeTable reads table as the configured publication streams it (see DescribeTable).
func (in *Inspector) DescribeTable(ctx context.Context, table string) (TableShape, error) {
	return DescribeTable(ctx, in.conn, in.cfg.Publication, table)
}

// major reads the major version from a server_version like "15.4 (Debian 15.4-1)".
func major(version string) int {
	end := 0
	for end < len(version) && version[end] >= '0' && version[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(version[:end])
	return n
}
