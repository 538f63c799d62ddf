package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/snapshot"
)

// urlKey names the key and variable of the database URL, for a fix.
const urlKey = "changefeed.database_url (HERALD_CHANGEFEED_DATABASE_URL)"

// closeTimeout bounds saying goodbye to a server, whatever is left of the checks' deadline.
const closeTimeout = 2 * time.Second

// checkPostgres reports the postgres.* checks against the changefeed's database, through a
// read-only changefeed.Inspector, and returns the tables of the policy as the publication
// streams them, for checkPolicy; nil when the database could not be read.
func checkPostgres(ctx context.Context, r *Report, c *config.Config) map[string]changefeed.TableShape {
	in, err := changefeed.Inspect(ctx, c.Changefeed())
	if err != nil {
		_, detail, fix := explain(err, "")
		if fix == "" {
			fix = "check the host, port and credentials"
		}
		r.fail("postgres.connect", "", detail, fix+"; the URL is "+urlKey)
		return nil
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = in.Close(cctx)
	}()
	s, err := in.Settings(ctx)
	if err != nil {
		r.failErr("postgres.connect", "", err, "check that the role may read pg_settings and pg_roles")
		return nil
	}
	tr := in.Transport()
	r.ok("postgres.connect", "", fmt.Sprintf("connected to %s as role %q, database %q", tr.Addr, s.User, s.Database))
	checkTLS(r, tr)
	if err := s.CheckVersion(); err != nil {
		// What the other checks read (the slot's two_phase, say) is not there before 14.
		r.failErr("postgres.version", "", err, "")
		return nil
	}
	r.ok("postgres.version", "", "PostgreSQL "+s.VersionString()+": 14 or newer")
	if err := s.CheckWALLevel(); err != nil {
		r.failErr("postgres.wal_level", "", err, "")
	} else {
		r.ok("postgres.wal_level", "", "wal_level = logical")
	}
	if err := s.CheckReplication(); err != nil {
		r.failErr("postgres.role", "", err, "")
	} else {
		r.ok("postgres.role", "", fmt.Sprintf("role %q may replicate (REPLICATION or superuser)", s.User))
	}
	checkSyncStandby(r, s)

	slot, slotErr := in.Slot(ctx, s.Database)
	if slotErr != nil {
		r.failErr("postgres.slot", c.ChangefeedSection.Slot, slotErr, "")
	}
	checkSlots(r, s, slot, slotErr == nil)
	checkSenders(r, s, slot)

	pub, pubErr := in.Publication(ctx)
	if pubErr != nil {
		r.failErr("postgres.publication", c.ChangefeedSection.Publication, pubErr, "")
	} else {
		checkPublication(r, c, pub)
	}

	// The policy's tables as the publication streams them: the table checks ask what their
	// rules need of the replica identity, and checkPolicy compiles the rules against them.
	p, _ := policy.New(c.Policy(), c.PolicyConfig()) // a rule that fails is checkPolicy's to report
	var shapes map[string]changefeed.TableShape
	if p != nil {
		shapes = map[string]changefeed.TableShape{}
		for _, name := range p.Tables() {
			shape, err := in.DescribeTable(ctx, name)
			if err != nil {
				r.failErr("postgres.table", name, err, "")
				continue
			}
			shapes[name] = shape
		}
	}
	if pubErr == nil {
		tables, err := in.Tables(ctx, pub)
		if err != nil {
			r.failErr("postgres.table", "", err, "")
		}
		for _, t := range tables {
			checkTable(r, c, pub, t)
			checkIdentity(r, p, shapes, t)
		}
	}

	if slotErr == nil {
		checkSlot(r, c, slot)
	}
	if prepared, err := in.Prepared(ctx); err != nil {
		r.failErr("postgres.prepared_xacts", "", err, "")
	} else {
		checkPrepared(r, s.Database, prepared)
	}
	if err := in.CheckSession(ctx); err != nil {
		r.failErr("postgres.session", "", err, "")
	} else {
		r.ok("postgres.session", "", "the settings Herald pins at connect hold: "+strings.Join(changefeed.PinnedSettings(), ", "))
	}
	checkEncoding(r, s.ServerEncoding)
	return shapes
}

// checkTLS reports postgres.tls: how the connection travels. Cleartext or an unverified
// certificate is a warning across a network, unless the operator wrote sslmode=disable.
func checkTLS(r *Report, t changefeed.Transport) {
	mode := "sslmode " + t.SSLMode
	if t.SSLMode == "" {
		mode = "no sslmode (libpq's default, prefer)"
	}
	verifyFix := "sslmode=verify-full in " + urlKey + " (with sslrootcert=<the server's CA file> unless the system trusts it)"
	switch {
	case t.TLS && (t.SSLMode == "verify-full" || t.SSLMode == "verify-ca"):
		r.ok("postgres.tls", "", fmt.Sprintf("encrypted (%s), the server's certificate verified: %s", t.Version, mode))
	case t.TLS && t.Local:
		r.ok("postgres.tls", "", fmt.Sprintf("encrypted (%s) to a server on this host; its certificate is not verified (%s)", t.Version, mode))
	case t.TLS:
		r.warn("postgres.tls", "", fmt.Sprintf("encrypted (%s), but the server's certificate is not verified (%s): anyone on the path to %s can pose as the server and read the password and the data", t.Version, mode, t.Addr),
			verifyFix)
	case t.Local:
		r.ok("postgres.tls", "", fmt.Sprintf("unencrypted, to a server on this host (%s)", t.Addr))
	case t.SSLMode == "disable":
		r.ok("postgres.tls", "", fmt.Sprintf("unencrypted to %s, as sslmode=disable asks: fit only for a network every host on which is trusted", t.Addr))
	default:
		r.warn("postgres.tls", "", fmt.Sprintf("unencrypted to %s under %s: the server offered no TLS, so the data crosses the network in clear", t.Addr, mode),
			"turn TLS on in Postgres (ssl = on, with ssl_cert_file and ssl_key_file) and set "+verifyFix)
	}
}

// checkSyncStandby reports postgres.sync_standby: the snapshot reader's sync-standby guard
// sees every role's transactions waiting for a synchronous standby, as snapshot.GuardAccess
// judges it.
func checkSyncStandby(r *Report, s changefeed.Settings) {
	a := snapshot.GuardAccess{Standbys: s.SyncStandbyNames, Role: s.User, SeesAll: s.ReadAllStats}
	if detail, fix, limited := a.Limited(); limited {
		r.warn("postgres.sync_standby", "", detail, fix)
		return
	}
	if a.Standbys == "" {
		r.ok("postgres.sync_standby", "", "no synchronous standby is named (synchronous_standby_names): no commit waits for one")
		return
	}
	r.ok("postgres.sync_standby", "", fmt.Sprintf("synchronous_standby_names is %q, and role %q reads every role's activity: a snapshot sees every commit stalled on a standby", a.Standbys, s.User))
}

// checkSlots reports postgres.replication_slots: a slot is free for a feed whose slot does not
// exist yet.
func checkSlots(r *Report, s changefeed.Settings, slot changefeed.Slot, read bool) {
	used := fmt.Sprintf("%d of %d replication slots (max_replication_slots) are in use", s.UsedSlots, s.MaxSlots)
	switch {
	case read && slot.Exists:
		r.ok("postgres.replication_slots", "", used+", Herald's among them")
	case !read:
		r.ok("postgres.replication_slots", "", used)
	default:
		if err := s.CheckFreeSlot(); err != nil {
			r.failErr("postgres.replication_slots", "", err, "")
			return
		}
		r.ok("postgres.replication_slots", "", used+": one is free for the slot herald serve creates")
	}
}

// checkSenders reports postgres.wal_senders. Every replication connection takes a WAL sender:
// the streaming node's, and each standby's while it asks for the leader lock.
func checkSenders(r *Report, s changefeed.Settings, slot changefeed.Slot) {
	free := s.MaxWALSenders - s.UsedWALSenders
	used := fmt.Sprintf("%d of %d WAL senders (max_wal_senders) are in use", s.UsedWALSenders, s.MaxWALSenders)
	fix := "raise max_wal_senders in postgresql.conf and restart Postgres, or end an idle replication client: SELECT pid, application_name, state FROM pg_stat_replication;"
	switch {
	case free > 0:
		r.ok("postgres.wal_senders", "", fmt.Sprintf("%s: %d free", used, free))
	case slot.Active:
		r.warn("postgres.wal_senders", "", used+": the slot streams, but another node's replication connection, or a restarted node's, would be refused", fix)
	default:
		r.fail("postgres.wal_senders", "", used+": Herald's replication connection would be refused", fix)
	}
}

// checkPublication reports postgres.publication: it exists (or herald serve can create it),
// and publishes every kind of change.
func checkPublication(r *Report, c *config.Config, pub changefeed.Publication) {
	if err := pub.Check(); err != nil {
		r.failErr("postgres.publication", pub.Name, err, "")
		return
	}
	if !pub.Exists {
		tables := make([]string, len(c.ChangefeedSection.Tables))
		for i, t := range c.ChangefeedSection.Tables {
			tables[i] = quoteTable(qualified(t))
		}
		r.warn("postgres.publication", pub.Name, fmt.Sprintf("publication %q does not exist: herald serve creates it at start for changefeed.tables, which needs the role to own them", pub.Name),
			fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s; (as the tables' owner), or let herald serve create it", quoteIdent(pub.Name), strings.Join(tables, ", ")))
		return
	}
	r.ok("postgres.publication", pub.Name, fmt.Sprintf("publication %q publishes insert, update, delete and truncate, for %d %s", pub.Name, len(pub.Tables), plural(len(pub.Tables), "table", "tables")))
}

// checkTable reports postgres.table for a table the feed streams: it exists, and the
// publication covers it.
func checkTable(r *Report, c *config.Config, pub changefeed.Publication, t changefeed.Table) {
	if !t.Streams {
		return // only in full_identity_tables: checkIdentity says so
	}
	if err := t.CheckExists(); err != nil {
		r.failErr("postgres.table", t.Name, err, "")
		return
	}
	if err := pub.CheckCovers(t.Name); err != nil {
		r.failErr("postgres.table", t.Name, err, "")
		return
	}
	if !pub.Exists {
		r.ok("postgres.table", t.Name, fmt.Sprintf("exists; herald serve publishes it when it creates publication %q", pub.Name))
		return
	}
	r.ok("postgres.table", t.Name, fmt.Sprintf("exists, and publication %q covers it", pub.Name))
}

// checkIdentity reports postgres.replica_identity: what Postgres logs of a table's old rows
// serves what the config (changefeed.full_identity_tables) and the table's row rule need.
func checkIdentity(r *Report, p *policy.Policy, shapes map[string]changefeed.TableShape, t changefeed.Table) {
	if err := t.CheckIdentity(); err != nil {
		r.failErr("postgres.replica_identity", t.Name, err, "")
		return
	}
	if !t.Exists {
		return // postgres.table says so
	}
	if need := policyNeeds(p, t.Name, shapes[t.Name]); len(need) > 0 {
		r.fail("postgres.replica_identity", t.Name,
			fmt.Sprintf("REPLICA IDENTITY %s, but the row rule of %s reads %s, which Postgres does not log in the old row of an update or delete: whether a subscriber could see the row before the change could not be told",
				t.Identity, t.Name, strings.Join(need, ", ")),
			"ALTER TABLE "+quoteTable(t.Name)+" REPLICA IDENTITY FULL;")
		return
	}
	switch t.Identity {
	case "FULL":
		r.ok("postgres.replica_identity", t.Name, "REPLICA IDENTITY FULL: updates and deletes carry the whole old row")
	default:
		r.ok("postgres.replica_identity", t.Name, fmt.Sprintf("REPLICA IDENTITY %s: updates and deletes carry the old row's key, and nothing configured needs more", t.Identity))
	}
}

// policyNeeds lists the columns table's row rule reads that its old images lack under its
// replica identity; none when the rule does not compile (checkPolicy reports that) or the
// table has no rules.
func policyNeeds(p *policy.Policy, table string, shape changefeed.TableShape) []string {
	if p == nil || len(shape.Columns) == 0 || shape.Identity == "FULL" {
		return nil
	}
	// Compiled as if FULL, so the compiler does not refuse what this is to find out.
	full := policyTable(shape)
	full.Identity = "FULL"
	tp, err := p.Table(table, full)
	if err != nil || tp == nil {
		return nil
	}
	var need []string
	for _, col := range tp.Row().Columns() {
		if shape.Identity == "NOTHING" || !slices.Contains(shape.Key, col) {
			need = append(need, col)
		}
	}
	return need
}

// checkSlot reports postgres.slot and, for a slot that exists and can stream, postgres.slot_lag.
func checkSlot(r *Report, c *config.Config, slot changefeed.Slot) {
	name := slot.Name
	if !slot.Exists {
		r.ok("postgres.slot", name, fmt.Sprintf("slot %q does not exist yet: herald serve creates it at start", name))
		return
	}
	if err := slot.Check(); err != nil {
		r.failErr("postgres.slot", name, err, "")
		return
	}
	state := "inactive: nothing streams from it now, and Postgres keeps the WAL it needs until Herald resumes"
	if slot.Active {
		state = "active (backend pid " + slot.ActivePID + ")"
	}
	drop := fmt.Sprintf("SELECT pg_drop_replication_slot('%s');", strings.ReplaceAll(name, "'", "''"))
	if slot.WALStatus == "unreserved" {
		r.warn("postgres.slot", name, fmt.Sprintf("slot %q is %s, and its wal_status is unreserved: it needs WAL past max_wal_size, which the next checkpoint may remove, and then it is lost", name, state),
			"start herald serve so it catches up and confirms; or raise max_slot_wal_keep_size in postgresql.conf; if the slot is abandoned: "+drop)
	} else {
		r.ok("postgres.slot", name, fmt.Sprintf("slot %q is %s; wal_status %s", name, state, slot.WALStatus))
	}

	lag, limit := slot.LagBytes(), uint64(c.ChangefeedSection.LagWarnBytes)
	at := fmt.Sprintf("confirmed %s, WAL at %s", slot.Confirmed, slot.WALEnd)
	if slot.SafeWALSize >= 0 {
		at += fmt.Sprintf("; %s more before max_slot_wal_keep_size loses it", bytesText(uint64(slot.SafeWALSize)))
	}
	if lag <= limit {
		r.ok("postgres.slot_lag", name, fmt.Sprintf("slot %q holds back %s of WAL (%s), within changefeed.lag_warn_bytes (%s)", name, bytesText(lag), at, config.Size(limit)))
		return
	}
	fix := "start herald serve, which resumes from the slot and confirms as it streams; if the slot is abandoned: " + drop
	if slot.Active {
		fix = "the stream is live but behind: read herald serve's logs and herald_changefeed_lag_bytes; raise changefeed.lag_warn_bytes if this lag is expected"
	}
	r.warn("postgres.slot_lag", name, fmt.Sprintf("slot %q holds back %s of WAL (%s), past changefeed.lag_warn_bytes (%s): Postgres keeps it on disk until the slot confirms past it", name, bytesText(lag), at, config.Size(limit)), fix)
}

// preparedWarnAge is how old a prepared transaction may be before postgres.prepared_xacts
// warns: a transaction manager commits or rolls back what it prepared within moments, so one
// this old is most often abandoned.
const preparedWarnAge = time.Minute

// checkPrepared reports postgres.prepared_xacts: no transaction prepared for two-phase commit
// in the database has waited past preparedWarnAge. Until one is committed or rolled back, the
// slot's restart point cannot pass its start (the server keeps the WAL from there), its changes
// reach no client, and a snapshot of a table that joined the publication since ends with
// table_not_ready.
func checkPrepared(r *Report, database string, prepared []changefeed.Prepared) {
	var old []changefeed.Prepared
	for _, p := range prepared {
		if p.Age >= preparedWarnAge {
			old = append(old, p)
		}
	}
	if len(old) == 0 {
		detail := fmt.Sprintf("no transaction is prepared for two-phase commit in database %q", database)
		if len(prepared) > 0 {
			detail = fmt.Sprintf("%d %s prepared for two-phase commit in database %q, none older than %s", len(prepared),
				plural(len(prepared), "transaction is", "transactions are"), database, preparedWarnAge)
		}
		r.ok("postgres.prepared_xacts", "", detail)
		return
	}
	first := old[0] // the oldest: Prepared lists them oldest first
	gid := "'" + strings.ReplaceAll(first.GID, "'", "''") + "'"
	r.warn("postgres.prepared_xacts", "", fmt.Sprintf("%d %s prepared for two-phase commit in database %q more than %s ago, the oldest %s by role %q %s ago: "+
		"until it is committed or rolled back, the slot cannot move its restart point past it (Postgres keeps the WAL from there), its changes reach no client, "+
		"and a snapshot of a table that joined the publication since ends with table_not_ready",
		len(old), plural(len(old), "transaction was", "transactions were"), database, preparedWarnAge, gid, first.Owner, first.Age.Round(time.Second)),
		"finish it from the transaction manager that prepared it; if it is abandoned, as a superuser or its owner: COMMIT PREPARED "+gid+"; or ROLLBACK PREPARED "+gid+
			"; (list them: SELECT gid, prepared, owner FROM pg_prepared_xacts WHERE database = current_database();)")
}

// checkEncoding reports postgres.encoding: the database's text reaches clients as UTF-8.
func checkEncoding(r *Report, encoding string) {
	switch {
	case changefeed.CheckEncoding(encoding) != nil:
		r.failErr("postgres.encoding", "", changefeed.CheckEncoding(encoding), "")
	case encoding == "UTF8":
		r.ok("postgres.encoding", "", "the database's encoding is UTF8")
	case changefeed.MessageEncodingConverted(encoding):
		r.ok("postgres.encoding", "", fmt.Sprintf("the database's encoding is %s: the server converts values and names to UTF8 (client_encoding is pinned), and Herald converts logical messages", encoding))
	default:
		r.warn("postgres.encoding", "", fmt.Sprintf("the database's encoding is %s: values and names are converted to UTF8, but logical message content is passed on as it was written", encoding),
			"emit logical messages as UTF-8: pg_logical_emit_message(true, '<prefix>', convert_to('<text>', 'UTF8')); or move the data to a UTF8 database")
	}
}

// qualified puts a bare table name in public, as the changefeed does.
func qualified(t string) string {
	if strings.Contains(t, ".") {
		return t
	}
	return "public." + t
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteTable quotes schema.table as two identifiers, for SQL in a fix.
func quoteTable(t string) string {
	schema, name, _ := strings.Cut(t, ".")
	return quoteIdent(schema) + "." + quoteIdent(name)
}
