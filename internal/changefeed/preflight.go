package changefeed

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/internal/change"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// minServerVersion is PostgreSQL 14: pgoutput protocol 2 (streamed transactions) and logical
// decoding messages (write tags) start there.
const minServerVersion = 140000

// quoteLiteral quotes s as a SQL string literal. The replication protocol only takes simple
// queries, so there are no bind parameters; names reach SQL only through this and quoteIdent.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), "'", "''") + "'"
}

// quoteIdent quotes s as a SQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}

// quoteTable quotes schema.table as two identifiers.
func quoteTable(t string) string {
	schema, name, _ := strings.Cut(t, ".")
	return quoteIdent(schema) + "." + quoteIdent(name)
}

// query runs one simple query and returns its rows as text. NULL is returned as nil.
func query(ctx context.Context, conn *pgconn.PgConn, sql string) ([][][]byte, error) {
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(results) == 0 {
		return nil, nil
	}
	return results[len(results)-1].Rows, nil
}

// preflight checks everything that must hold before streaming, creating the publication and
// the slot when absent. Every check that can refuse runs before anything is created: a
// publication left behind by a refusal would be published over a table the checks found unfit,
// and a published table without a replica identity makes the application's UPDATEs fail. The
// publication is created before the slot: pgoutput looks it up with the historic snapshot of
// each change, so a slot made before its publication fails to decode changes from before the
// publication existed.
//
// Each fact is read and judged by the same functions Inspector uses, so what `herald doctor`
// reports is what preflight would refuse.
func preflight(ctx context.Context, conn *pgconn.PgConn, cfg *Config, log func(string, ...any)) (slotState, error) {
	settings, err := readSettings(ctx, conn)
	if err != nil {
		return slotState{}, err
	}
	for _, check := range []func() error{settings.CheckVersion, settings.CheckWALLevel, settings.CheckReplication} {
		if err := check(); err != nil {
			return slotState{}, err
		}
	}

	create, tables, err := checkPublication(ctx, conn, cfg)
	if err != nil {
		return slotState{}, err
	}
	if err := checkIdentity(cfg, tables); err != nil {
		return slotState{}, err
	}
	slot, err := readSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return slotState{}, err
	}
	if slot.exists {
		if err := checkSlot(slot, cfg, settings.Database); err != nil {
			return slotState{}, err
		}
	} else if err := settings.CheckFreeSlot(); err != nil {
		return slotState{}, err
	}

	// Nothing below refuses: from here on, preflight only creates what is absent.
	if create {
		quoted := make([]string, len(cfg.Tables))
		for i, t := range cfg.Tables {
			quoted[i] = quoteTable(t)
		}
		sql := "CREATE PUBLICATION " + quoteIdent(cfg.Publication) + " FOR TABLE " + strings.Join(quoted, ", ")
		if _, err := query(ctx, conn, sql); err != nil {
			return slotState{}, pgError(StagePublication, "create publication "+cfg.Publication, err)
		}
		log("created publication", "publication", cfg.Publication, "tables", cfg.Tables)
	}
	if slot.exists {
		return slot, nil
	}
	// NOEXPORT_SNAPSHOT: nothing here copies a snapshot. TWO_PHASE is never asked for: it would
	// decode prepared transactions before they commit, and a client must never see data that
	// may yet roll back.
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, quoteIdent(cfg.Slot), "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: cfg.TemporarySlot, SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return slotState{}, pgError(StageSlot, "create replication slot "+cfg.Slot, err)
	}
	log("created replication slot", "consistent_point", res.ConsistentPoint, "temporary", cfg.TemporarySlot)
	slot = slotState{exists: true, plugin: "pgoutput", slotType: "logical", database: settings.Database, temporary: cfg.TemporarySlot}
	// A new slot starts at its consistent point: the position the stream resumes after.
	slot.confirmed, _ = change.ParseLSN(res.ConsistentPoint)
	return slot, nil
}

// Settings are the server-wide facts streaming depends on, as the server reports them to the
// role of the database URL.
type Settings struct {
	// Version is server_version_num: 150004 is 15.4.
	Version int
	// WALLevel is wal_level: minimal, replica or logical.
	WALLevel string
	// MaxSlots is max_replication_slots, UsedSlots the slots that exist, of every database.
	MaxSlots, UsedSlots int
	// MaxWALSenders is max_wal_senders, UsedWALSenders the WAL senders running: every
	// replication connection holds one, a Herald standby's too.
	MaxWALSenders, UsedWALSenders int
	// User is the role of the database URL, Database the database it names.
	User, Database string
	// Replication says the role has the REPLICATION attribute, or is a superuser.
	Replication bool
	// ServerEncoding is the database's encoding, as Postgres names it: UTF8, LATIN1, SQL_ASCII.
	ServerEncoding string
	// SyncStandbyNames is synchronous_standby_names, and ReadAllStats says the role has
	// pg_read_all_stats's privileges (or is a superuser): what the snapshot reader's
	// sync-standby guard can see (snapshot.GuardAccess).
	SyncStandbyNames string
	ReadAllStats     bool
}

// readSettings reads Settings in one query.
func readSettings(ctx context.Context, conn *pgconn.PgConn) (Settings, error) {
	rows, err := query(ctx, conn, `SELECT current_setting('server_version_num'), current_setting('wal_level'),
		current_setting('max_replication_slots'), current_setting('max_wal_senders'),
		(SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_stat_replication),
		current_user, current_database(),
		(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
		current_setting('server_encoding'), current_setting('synchronous_standby_names'),
		pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')`)
	if err != nil {
		return Settings{}, pgError(StagePreflight, "read server settings", err)
	}
	if len(rows) != 1 || len(rows[0]) != 12 {
		return Settings{}, &Error{Stage: StagePreflight, Detail: "the server settings query returned an unexpected shape"}
	}
	r := rows[0]
	s := Settings{WALLevel: string(r[1]), User: string(r[6]), Database: string(r[7]), Replication: string(r[8]) == "t", ServerEncoding: string(r[9]),
		SyncStandbyNames: string(r[10]), ReadAllStats: string(r[11]) == "t"}
	s.Version, _ = strconv.Atoi(string(r[0]))
	s.MaxSlots, _ = strconv.Atoi(string(r[2]))
	s.MaxWALSenders, _ = strconv.Atoi(string(r[3]))
	s.UsedSlots, _ = strconv.Atoi(string(r[4]))
	s.UsedWALSenders, _ = strconv.Atoi(string(r[5]))
	return s, nil
}

// VersionString is Version as people write it: 15.4, or 9.6.24 before 10.
func (s Settings) VersionString() string {
	if s.Version < 100000 {
		return fmt.Sprintf("%d.%d.%d", s.Version/10000, s.Version/100%100, s.Version%100)
	}
	return fmt.Sprintf("%d.%d", s.Version/10000, s.Version%10000)
}

// CheckVersion refuses a server older than 14. Errors are *Error.
func (s Settings) CheckVersion() error {
	if s.Version >= minServerVersion {
		return nil
	}
	return &Error{Stage: StagePreflight, Permanent: true,
		Detail: fmt.Sprintf("PostgreSQL %s is too old: Herald needs 14 or newer for streamed transactions and logical messages", s.VersionString()),
		Fix:    "upgrade PostgreSQL to 14 or newer"}
}

// CheckWALLevel refuses a wal_level other than logical. Errors are *Error.
func (s Settings) CheckWALLevel() error {
	if s.WALLevel == "logical" {
		return nil
	}
	return &Error{Stage: StagePreflight, Permanent: true,
		Detail: fmt.Sprintf("wal_level is %q, and logical replication needs \"logical\"", s.WALLevel),
		Fix:    "ALTER SYSTEM SET wal_level = logical; then restart Postgres"}
}

// CheckReplication refuses a role that may not replicate. Errors are *Error.
func (s Settings) CheckReplication() error {
	if s.Replication {
		return nil
	}
	return &Error{Stage: StagePreflight, Permanent: true,
		Detail: fmt.Sprintf("role %q lacks the REPLICATION attribute", s.User),
		Fix:    fmt.Sprintf("ALTER ROLE %s REPLICATION;", quoteIdent(s.User))}
}

// CheckFreeSlot refuses a server where every replication slot is taken, for a feed whose slot
// does not exist yet and must be created. Errors are *Error.
func (s Settings) CheckFreeSlot() error {
	if s.UsedSlots < s.MaxSlots {
		return nil
	}
	return &Error{Stage: StageSlot,
		Detail: fmt.Sprintf("all %d replication slots (max_replication_slots) are in use", s.MaxSlots),
		Fix:    "raise max_replication_slots and restart Postgres, or drop an unused slot: SELECT slot_name, active FROM pg_replication_slots; SELECT pg_drop_replication_slot('<name>');"}
}

// slotState is the row pg_replication_slots has for our slot.
type slotState struct {
	exists    bool
	plugin    string
	slotType  string
	database  string
	temporary bool
	active    bool
	activePID string
	walStatus string
	confirmed change.LSN
	twoPhase  bool
	// walEnd is how far the server's WAL reached when the slot was read: the write position
	// on a primary, the replay position on a standby. Zero when unknown.
	walEnd change.LSN
	// safeWALSize is how many more bytes of WAL may be written before the slot is in danger
	// of being lost (max_slot_wal_keep_size); -1 when unlimited.
	safeWALSize int64
}

func readSlot(ctx context.Context, conn *pgconn.PgConn, name string) (slotState, error) {
	rows, err := query(ctx, conn, `SELECT plugin, slot_type, database, temporary, active, active_pid,
		wal_status, confirmed_flush_lsn, two_phase,
		(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END), safe_wal_size
		FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(name))
	if err != nil {
		return slotState{}, pgError(StageSlot, "read replication slot "+name, err)
	}
	if len(rows) == 0 {
		return slotState{}, nil
	}
	r := rows[0]
	s := slotState{exists: true, plugin: string(r[0]), slotType: string(r[1]), database: string(r[2]),
		temporary: string(r[3]) == "t", active: string(r[4]) == "t", activePID: string(r[5]),
		walStatus: string(r[6]), twoPhase: string(r[8]) == "t", safeWALSize: -1}
	if r[7] != nil {
		s.confirmed, _ = change.ParseLSN(string(r[7]))
	}
	if r[9] != nil {
		s.walEnd, _ = change.ParseLSN(string(r[9]))
	}
	if r[10] != nil {
		s.safeWALSize, _ = strconv.ParseInt(string(r[10]), 10, 64)
	}
	return s, nil
}

// checkSlot refuses a slot the feed cannot stream from (slotUnusable), and one another
// consumer is streaming from.
func checkSlot(s slotState, cfg *Config, database string) error {
	if err := slotUnusable(s, cfg, database); err != nil {
		return err
	}
	if s.active {
		return &Error{Stage: StageSlot,
			Detail: fmt.Sprintf("slot %q is in use by backend pid %s", cfg.Slot, s.activePID),
			Fix:    "stop the other consumer of the slot, or give Herald its own slot name (changefeed.slot)"}
	}
	return nil
}

// slotUnusable refuses a slot no feed can ever stream from: of another kind, in another
// database, lost, or decoding two-phase.
func slotUnusable(s slotState, cfg *Config, database string) *Error {
	name := cfg.Slot
	drop := fmt.Sprintf("SELECT pg_drop_replication_slot(%s);", quoteLiteral(name))
	switch {
	case s.slotType != "logical" || s.plugin != "pgoutput":
		return &Error{Stage: StageSlot, Permanent: true,
			Detail: fmt.Sprintf("slot %q exists but is a %s slot with plugin %q, not a logical pgoutput slot", name, s.slotType, s.plugin),
			Fix:    "give Herald its own slot name (changefeed.slot), or if the slot is unused: " + drop}
	case s.database != database:
		return &Error{Stage: StageSlot, Permanent: true,
			Detail: fmt.Sprintf("slot %q belongs to database %q, not %q", name, s.database, database),
			Fix:    "give Herald its own slot name (changefeed.slot)"}
	case s.walStatus == "lost":
		return &Error{Stage: StageSlot, Permanent: true,
			Detail: fmt.Sprintf("slot %q is lost: Postgres removed WAL it still needed (max_slot_wal_keep_size), so the changes since its position are gone and it can never stream again", name),
			Fix:    drop + " then restart Herald; every client must refetch its data, since changes were missed"}
	case s.twoPhase:
		return &Error{Stage: StageSlot, Permanent: true,
			Detail: fmt.Sprintf("slot %q was created with two-phase decoding, which sends prepared transactions before they commit", name),
			Fix:    drop + " then restart Herald, which creates it without two-phase"}
	}
	return nil
}

// pubTable is a table that streams, as the catalog names it, with what decides its replica
// identity.
type pubTable struct {
	name          string // schema.table
	identity      byte   // relreplident
	hasPK         bool
	hasIdentIndex bool // an index is marked as its replica identity
}

// identityColumns are the pubTable columns after the name, for a query over pg_class c.
const identityColumns = `c.relreplident,
	EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
	EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)`

func scanPubTable(r [][]byte) pubTable {
	t := pubTable{name: string(r[0]), hasPK: string(r[2]) == "t", hasIdentIndex: string(r[3]) == "t"}
	if len(r[1]) > 0 {
		t.identity = r[1][0]
	}
	return t
}

// publication is the row pg_publication has for a publication, and the tables it covers.
type publication struct {
	name    string
	exists  bool
	actions [4]bool             // publishes insert, update, delete, truncate
	tables  map[string]pubTable // by schema.table
}

// publishedActions are the kinds of change a publication publishes, in pg_publication's order.
var publishedActions = [4]string{"insert", "update", "delete", "truncate"}

func readPublication(ctx context.Context, conn *pgconn.PgConn, name string) (publication, error) {
	pub := quoteLiteral(name)
	rows, err := query(ctx, conn, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = `+pub)
	if err != nil {
		return publication{}, pgError(StagePublication, "read publication "+name, err)
	}
	p := publication{name: name}
	if len(rows) == 0 {
		return p, nil
	}
	p.exists = true
	for i := range publishedActions {
		p.actions[i] = string(rows[0][i]) == "t"
	}
	rows, err = query(ctx, conn, `SELECT n.nspname || '.' || c.relname, `+identityColumns+`
		FROM pg_publication_tables p
		JOIN pg_namespace n ON n.nspname = p.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
		WHERE p.pubname = `+pub)
	if err != nil {
		return publication{}, pgError(StagePublication, "read the tables of publication "+name, err)
	}
	p.tables = map[string]pubTable{}
	for _, r := range rows {
		t := scanPubTable(r)
		p.tables[t.name] = t
	}
	return p, nil
}

// checkActions refuses a publication that leaves a kind of change out.
func (p publication) checkActions() *Error {
	var missing []string
	for i, op := range publishedActions {
		if !p.actions[i] {
			missing = append(missing, op)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &Error{Stage: StagePublication, Permanent: true,
		Detail: fmt.Sprintf("publication %q does not publish %s, so those changes would never reach a client", p.name, strings.Join(missing, ", ")),
		Fix:    "ALTER PUBLICATION " + quoteIdent(p.name) + " SET (publish = 'insert, update, delete, truncate');"}
}

// checkCovers refuses a publication that does not cover every one of tables.
func (p publication) checkCovers(tables []string) *Error {
	var missing []string
	for _, t := range tables {
		if _, ok := p.tables[t]; !ok {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	quoted := make([]string, len(missing))
	for i, t := range missing {
		quoted[i] = quoteTable(t)
	}
	return &Error{Stage: StagePublication, Permanent: true,
		Detail: fmt.Sprintf("publication %q does not cover %s", p.name, strings.Join(missing, ", ")),
		Fix:    "ALTER PUBLICATION " + quoteIdent(p.name) + " ADD TABLE " + strings.Join(quoted, ", ") + ";"}
}

// missingPublication is the refusal of a publication that does not exist when no tables are
// configured to create it for.
func missingPublication(name string) *Error {
	return &Error{Stage: StagePublication, Permanent: true,
		Detail: fmt.Sprintf("publication %q does not exist and no tables are configured to create it for", name),
		Fix:    "name the tables to stream (changefeed.tables, or --table for herald tail), or CREATE PUBLICATION " + quoteIdent(name) + " FOR TABLE <schema.table>, ...;"}
}

// noSuchTable is the refusal of a configured table that does not exist.
func noSuchTable(name string) *Error {
	return &Error{Stage: StagePublication, Permanent: true,
		Detail: fmt.Sprintf("table %s does not exist", name),
		Fix:    "create it, or correct its name in changefeed.tables (schema.table, case-sensitive)"}
}

// readTables reads the replica identity of each of names that exists, by schema.table.
func readTables(ctx context.Context, conn *pgconn.PgConn, names []string) (map[string]pubTable, error) {
	byName := map[string]pubTable{}
	if len(names) == 0 {
		return byName, nil
	}
	regclasses := make([]string, len(names))
	for i, t := range names {
		regclasses[i] = "to_regclass(" + quoteLiteral(quoteTable(t)) + ")"
	}
	rows, err := query(ctx, conn, `SELECT n.nspname || '.' || c.relname, `+identityColumns+`
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid IN (`+strings.Join(regclasses, ", ")+`)`)
	if err != nil {
		return nil, pgError(StagePublication, "read the replica identity of the tables to publish", err)
	}
	for _, r := range rows {
		t := scanPubTable(r)
		byName[t.name] = t
	}
	return byName, nil
}

// checkPublication checks that the publication, when it exists, covers every configured table
// and publishes every kind of change, and otherwise that it can be created. It only reads:
// create says the caller is to create it, once every other check has passed too. It returns
// the tables that will stream.
func checkPublication(ctx context.Context, conn *pgconn.PgConn, cfg *Config) (create bool, tables []pubTable, err error) {
	p, err := readPublication(ctx, conn, cfg.Publication)
	if err != nil {
		return false, nil, err
	}
	for _, t := range cfg.Tables {
		if err := tableExists(ctx, conn, t); err != nil {
			return false, nil, err
		}
	}
	if !p.exists {
		if len(cfg.Tables) == 0 {
			return false, nil, missingPublication(cfg.Publication)
		}
		byName, err := readTables(ctx, conn, cfg.Tables)
		if err != nil {
			return false, nil, err
		}
		for _, name := range cfg.Tables {
			t, ok := byName[name]
			if !ok { // dropped since tableExists looked
				return false, nil, noSuchTable(name)
			}
			tables = append(tables, t)
		}
		return true, tables, nil
	}
	if e := p.checkActions(); e != nil {
		return false, nil, e
	}
	if e := p.checkCovers(cfg.Tables); e != nil {
		return false, nil, e
	}
	if len(cfg.Tables) == 0 {
		for _, t := range p.tables {
			tables = append(tables, t)
		}
		sort.Slice(tables, func(i, j int) bool { return tables[i].name < tables[j].name })
	} else {
		for _, t := range cfg.Tables {
			tables = append(tables, p.tables[t])
		}
	}
	return false, tables, nil
}

func tableExists(ctx context.Context, conn *pgconn.PgConn, t string) error {
	rows, err := query(ctx, conn, `SELECT to_regclass(`+quoteLiteral(quoteTable(t))+`) IS NOT NULL`)
	if err != nil {
		return pgError(StagePublication, "look up table "+t, err)
	}
	if len(rows) != 1 || string(rows[0][0]) != "t" {
		return noSuchTable(t)
	}
	return nil
}

// checkIdentity refuses tables whose replica identity cannot serve (identityError), and a table
// configured as needing full old images that does not stream.
func checkIdentity(cfg *Config, tables []pubTable) error {
	full := map[string]bool{}
	for _, t := range cfg.FullIdentityTables {
		full[t] = true
	}
	for _, t := range tables {
		if e := identityError(t, full[t.name]); e != nil {
			return e
		}
	}
	for _, t := range cfg.FullIdentityTables {
		found := false
		for _, pt := range tables {
			found = found || pt.name == t
		}
		if !found {
			return fullNotStreamed(t)
		}
	}
	return nil
}

// identityError refuses a table that must be REPLICA IDENTITY FULL (full) and is not, and one
// with no identity at all, on which Postgres makes the application's own UPDATE and DELETE
// fail once the table is published.
func identityError(t pubTable, full bool) *Error {
	alter := "ALTER TABLE " + quoteTable(t.name) + " REPLICA IDENTITY FULL;"
	if full && t.identity != 'f' {
		return &Error{Stage: StagePreflight, Permanent: true,
			Detail: fmt.Sprintf("table %s must be REPLICA IDENTITY FULL: its old row is needed whole on UPDATE and DELETE, and Postgres only logs the key", t.name),
			Fix:    alter}
	}
	var why string
	switch {
	case t.identity == 'n':
		why = "REPLICA IDENTITY NOTHING"
	case t.identity == 'd' && !t.hasPK:
		why = "no primary key"
	case t.identity == 'i' && !t.hasIdentIndex:
		// Postgres keeps relreplident 'i' when the index is dropped, and acts as NOTHING.
		why = "its replica identity index was dropped"
	}
	if why != "" {
		return &Error{Stage: StagePreflight, Permanent: true,
			Detail: fmt.Sprintf("table %s has no replica identity (%s), so once published its UPDATEs and DELETEs fail in the application", t.name, why),
			Fix:    "add a primary key to " + t.name + ", or " + alter}
	}
	return nil
}

func fullNotStreamed(table string) *Error {
	return &Error{Stage: StagePreflight, Permanent: true,
		Detail: fmt.Sprintf("table %s is configured to need full old images but is not streamed", table),
		Fix:    "add it to changefeed.tables, or remove it from changefeed.full_identity_tables"}
}
