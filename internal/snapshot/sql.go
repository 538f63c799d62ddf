package snapshot

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/handoff"
)

// The SQL of a read, built here and nowhere else so that a table test can pin its text. Every
// name is quoted (quoteIdent); every value the filter compares with is a parameter
// (filter.SQL), never spelt into the text.

// cursorName is the read's cursor; one per transaction, so a constant.
const cursorName = "herald_snapshot"

// quoteIdent quotes a name as a SQL identifier: in double quotes, each double quote doubled.
// Postgres names hold no NUL, so none is expected; one is dropped rather than let it end the
// query text early.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}

// splitTable splits "schema.table" at its first dot, as the changefeed names a table and reads
// its table list: a schema whose name holds a dot cannot be told from a table whose name does.
func splitTable(t string) (schema, name string, ok bool) {
	schema, name, ok = strings.Cut(t, ".")
	return schema, name, ok && schema != "" && name != ""
}

// pinnedSettings are the session settings the changefeed pins on every connection
// (changefeed.ConnConfig), set again for the read's transaction alone (SET LOCAL) whatever its
// pool set: the rows' text must be what the walsender writes for the same values, or the same
// row would reach a client as two different values. client_encoding is not among them: pgx
// refuses a connection not in UTF8.
var pinnedSettings = [...][2]string{
	{"timezone", "'UTC'"},
	{"datestyle", "'ISO'"},
	{"intervalstyle", "'postgres'"},
	{"bytea_output", "'hex'"},
	{"extra_float_digits", "3"},
}

// setupSQL is the statements after BEGIN and before handoff.FirstStatement, sent as one simple
// query: none of them takes a snapshot (Postgres leaves SET and LOCK out of the statements that
// do, so that they can open a REPEATABLE READ transaction), so FirstStatement still fixes it.
//
//   - statement_timeout and idle_in_transaction_session_timeout bound every statement and every
//     wait for the Sink by timeoutMS, and transaction_timeout (Postgres 17 on) the whole
//     transaction: the server ends the transaction by itself even if Herald is stuck, so its
//     snapshot holds VACUUM back no longer than that.
//   - cursor_tuple_fraction 1 plans the cursor for reading every row, as a read does, rather
//     than for the first tenth of them.
//   - LOCK TABLE ... IN ACCESS SHARE MODE, before the snapshot, is the lock the read would take
//     anyway, taken early: a change to the table's columns (ALTER TABLE) takes ACCESS
//     EXCLUSIVE, so none can commit from here to COMMIT, and one that committed before is
//     visible to the snapshot, which is taken after. The columns the snapshot's catalog shows
//     (schemaSQL) are then the columns every row is read with. Without it, an ALTER TABLE
//     committed between the snapshot and the first read of the table would go unseen by the
//     catalog read yet apply to the rows, and one that rewrites the table leaves a snapshot
//     older than it an empty table.
func setupSQL(schema, name string, timeoutMS int64, major int) string {
	ms := strconv.FormatInt(timeoutMS, 10)
	var b strings.Builder
	b.WriteString("SET LOCAL statement_timeout = " + ms)
	b.WriteString("; SET LOCAL idle_in_transaction_session_timeout = " + ms)
	if major >= 17 {
		b.WriteString("; SET LOCAL transaction_timeout = " + ms)
	}
	for _, s := range pinnedSettings {
		b.WriteString("; SET LOCAL " + s[0] + " = " + s[1])
	}
	b.WriteString("; SET LOCAL cursor_tuple_fraction = 1")
	b.WriteString("; LOCK TABLE " + quoteIdent(schema) + "." + quoteIdent(name) + " IN ACCESS SHARE MODE")
	return b.String()
}

// firstSQL is handoff.FirstStatement with one more column: the sync-standby guard's count
// (stalledColumn). In the same statement, the count is read right after the snapshot is taken,
// with no round trip between in which a stalled transaction could stop waiting unseen, and at
// no cost of its own.
func firstSQL(lookback time.Duration) string {
	return handoff.FirstStatement + ", " + stalledColumn(lookback)
}

// stalledColumn counts the transactions of this database waiting for a synchronous standby
// (wait event SyncRep: committed, streamed, and not yet visible) whose transaction began more
// than lookback ago, as far as the role may see them (pg_stat_activity shows another role's
// wait only to a role with pg_read_all_stats's privileges). Another database's commits are
// never in this database's stream, so its stalled ones cannot be missed. With no synchronous
// standby named it is 0, and pg_stat_activity is not read: a CASE evaluates a subquery only on
// the branch taken.
//
// The transaction's start, not the wait's, is what pg_stat_activity shows: a transaction that
// began long ago and has only just started waiting counts too, which errs on the side of
// refusing (the client retries), never of missing one. now() is the read transaction's start,
// on the server's clock, as xact_start is. The look-back is spelt into the text in whole
// milliseconds, at least 1: it is a number of the server's own configuration, never a client's.
func stalledColumn(lookback time.Duration) string {
	ms := max(lookback.Milliseconds(), 1)
	return `CASE WHEN current_setting('synchronous_standby_names') = '' THEN 0 ELSE ` +
		`(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event = 'SyncRep' AND datid = ` + thisDatabase + ` ` +
		`AND xact_start < now() - interval '` + strconv.FormatInt(ms, 10) + ` milliseconds') END`
}

// thisDatabase is the OID of the database the connection is in: pg_stat_activity's datid.
const thisDatabase = `(SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())`

// olderHereSQL gives the oldest of the transactions $1 (xid8 values, as int8) that neither a
// backend of another database holds nor another database has prepared, or NULL when every one
// is another database's. pg_stat_activity shows each backend's database and top-level
// transaction id to every role, and pg_prepared_xacts each prepared transaction's; the 32-bit
// id (xid) names one transaction among those running, which span less than 2^31 ids.
const olderHereSQL = `SELECT min(x) FROM unnest($1::int8[]) AS x ` +
	`WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a ` +
	`WHERE a.backend_xid = pg_catalog.xid(x::text::xid8) AND a.datid IS DISTINCT FROM ` + thisDatabase + `) ` +
	`AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_xacts p ` +
	`WHERE p.transaction = pg_catalog.xid(x::text::xid8) AND p.database <> current_database())`

// accessSQL reads what the sync-standby guard can see (GuardAccess): the synchronous standbys
// named, the role, and whether it has pg_read_all_stats's privileges, without which
// pg_stat_activity hides every other role's wait event. USAGE asks for the privileges, not
// bare membership (a member through a NOINHERIT grant has not got them); a superuser has them.
const accessSQL = `SELECT current_setting('synchronous_standby_names'), current_user::text, ` +
	`pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')`

// schemaSQL reads the table's columns as the snapshot's catalog holds them: each live column
// in attnum order, with its type and, for a domain, every type under it down to the built-in
// one: the changefeed and the catalog readers type a domain's values by one or another of
// them. $1 is the schema, $2 the table.
const schemaSQL = `WITH RECURSIVE cols AS (
  SELECT a.attnum, a.attname::text AS name, a.atttypid AS typ
    FROM pg_catalog.pg_attribute a
    JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
), chain(attnum, typ, depth) AS (
  SELECT attnum, typ, 0 FROM cols
  UNION ALL
  SELECT ch.attnum, t.typbasetype, ch.depth + 1
    FROM chain ch JOIN pg_catalog.pg_type t ON t.oid = ch.typ
   WHERE t.typbasetype <> 0 AND ch.depth < 32
)
SELECT c.name, ARRAY(SELECT ch.typ::int8 FROM chain ch WHERE ch.attnum = c.attnum ORDER BY ch.depth)
  FROM cols c ORDER BY c.attnum`

// declareSQL is the cursor over the rows: the request's columns, raw (the values' text is
// their type's output, exactly what pgoutput sends; a cast to text is not: true::text is
// "true" where the output is "t", char(n) loses its padding, an inet its /32), the filter as
// the WHERE clause, in key order. Columns are qualified by the table's alias, so that no
// column name is read as anything else in ORDER BY. args are the filter's parameters.
func declareSQL(schema, name string, cols []Column, key []string, where string) string {
	var b strings.Builder
	b.WriteString("DECLARE " + cursorName + " NO SCROLL CURSOR FOR SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("t." + quoteIdent(c.Name))
	}
	b.WriteString(" FROM " + quoteIdent(schema) + "." + quoteIdent(name) + " AS t WHERE ")
	b.WriteString(where)
	b.WriteString(" ORDER BY ")
	for i, k := range key {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("t." + quoteIdent(k))
	}
	return b.String()
}

// fetchSQL reads the cursor's next n rows.
func fetchSQL(n int) string { return fmt.Sprintf("FETCH FORWARD %d FROM %s", n, cursorName) }

// fenceSQL emits the fence: a non-transactional logical message, so the stream sees it at once
// rather than when some transaction commits. From Postgres 17 it is flushed as it is written,
// rather than up to wal_writer_delay later; before, the flush argument does not exist.
func fenceSQL(major int) string {
	if major >= 17 {
		return `SELECT pg_logical_emit_message(false, $1::text, $2::text, true)::text`
	}
	return `SELECT pg_logical_emit_message(false, $1::text, $2::text)::text`
}
