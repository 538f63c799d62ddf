package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
)

// TestTLSRule: how the connection travels, judged without a server.
func TestTLSRule(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tr     changefeed.Transport
		status Status
	}{
		{"verified", changefeed.Transport{Addr: "db.internal:5432", TLS: true, Version: "TLS 1.3", SSLMode: "verify-full"}, OK},
		{"verified CA", changefeed.Transport{Addr: "db.internal:5432", TLS: true, Version: "TLS 1.3", SSLMode: "verify-ca"}, OK},
		{"unverified across a network", changefeed.Transport{Addr: "db.internal:5432", TLS: true, Version: "TLS 1.3", SSLMode: "require"}, Warn},
		{"unverified by default", changefeed.Transport{Addr: "10.0.0.9:5432", TLS: true, Version: "TLS 1.2"}, Warn},
		{"unverified on this host", changefeed.Transport{Addr: "127.0.0.1:5432", Local: true, TLS: true, Version: "TLS 1.3", SSLMode: "require"}, OK},
		{"cleartext on this host", changefeed.Transport{Addr: "/run/postgresql/.s.PGSQL.5432", Local: true}, OK},
		{"cleartext asked for", changefeed.Transport{Addr: "db.internal:5432", SSLMode: "disable"}, OK},
		{"cleartext fallen back to", changefeed.Transport{Addr: "db.internal:5432", SSLMode: "prefer"}, Warn},
		{"cleartext by default", changefeed.Transport{Addr: "db.internal:5432"}, Warn},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{}
			checkTLS(r, tt.tr)
			fix := []string{}
			if tt.status != OK {
				fix = append(fix, "sslmode=verify-full", "changefeed.database_url")
			}
			want(t, r, "postgres.tls", "", tt.status, fix...)
		})
	}
}

func TestSendersAndSlotsRules(t *testing.T) {
	full := changefeed.Settings{MaxWALSenders: 4, UsedWALSenders: 4, MaxSlots: 2, UsedSlots: 2}
	r := &Report{}
	checkSenders(r, full, changefeed.Slot{})
	want(t, r, "postgres.wal_senders", "", Fail, "max_wal_senders", "pg_stat_replication")
	r = &Report{}
	checkSenders(r, full, changefeed.Slot{Exists: true, Active: true})
	want(t, r, "postgres.wal_senders", "", Warn, "max_wal_senders")
	r = &Report{}
	checkSenders(r, changefeed.Settings{MaxWALSenders: 4, UsedWALSenders: 1}, changefeed.Slot{})
	want(t, r, "postgres.wal_senders", "", OK)

	r = &Report{}
	checkSlots(r, full, changefeed.Slot{}, true)
	want(t, r, "postgres.replication_slots", "", Fail, "max_replication_slots", "pg_drop_replication_slot")
	r = &Report{}
	checkSlots(r, full, changefeed.Slot{Exists: true}, true)
	want(t, r, "postgres.replication_slots", "", OK)
}

func TestEncodingRule(t *testing.T) {
	for enc, status := range map[string]Status{"UTF8": OK, "LATIN1": OK, "WIN1252": OK, "SQL_ASCII": Fail, "MULE_INTERNAL": Warn, "EUC_TW": Warn} {
		r := &Report{}
		checkEncoding(r, enc)
		want(t, r, "postgres.encoding", "", status)
	}
}

// TestSyncStandbyRule: the guard's access, judged without a server: a warning only when a
// synchronous standby is named and the role cannot see other roles' waits.
func TestSyncStandbyRule(t *testing.T) {
	for _, tt := range []struct {
		name   string
		s      changefeed.Settings
		status Status
		fix    []string
	}{
		{"no standby named", changefeed.Settings{User: "herald"}, OK, nil},
		{"no standby named, stats unreadable", changefeed.Settings{User: "herald", ReadAllStats: false}, OK, nil},
		{"standby named, stats readable", changefeed.Settings{User: "herald", SyncStandbyNames: "ANY 1 (a, b)", ReadAllStats: true}, OK, nil},
		{"standby named, stats unreadable", changefeed.Settings{User: "herald", SyncStandbyNames: "ANY 1 (a, b)"}, Warn, []string{`GRANT pg_read_all_stats TO "herald";`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{}
			checkSyncStandby(r, tt.s)
			want(t, r, "postgres.sync_standby", "", tt.status, tt.fix...)
		})
	}
}

// TestPreparedRule: prepared transactions judged without a server: a warning only for one
// prepared at least preparedWarnAge ago, naming the oldest, with its gid quoted in the fix.
func TestPreparedRule(t *testing.T) {
	young := changefeed.Prepared{GID: "young", Owner: "app", Age: time.Second}
	old := changefeed.Prepared{GID: "it's old", Owner: "app", Age: 2 * time.Hour}
	older := changefeed.Prepared{GID: "older", Owner: "batch", Age: 3 * time.Hour}
	for _, tt := range []struct {
		name     string
		prepared []changefeed.Prepared
		status   Status
		detail   string
		fix      []string
	}{
		{"none", nil, OK, "no transaction is prepared", nil},
		{"a young one", []changefeed.Prepared{young}, OK, "1 transaction is prepared", nil},
		{"just at the age", []changefeed.Prepared{{GID: "g", Age: preparedWarnAge}}, Warn, "1 transaction was prepared", []string{"COMMIT PREPARED 'g';"}},
		{"old ones and a young one", []changefeed.Prepared{older, old, young}, Warn, `2 transactions were prepared for two-phase commit in database "app" more than 1m0s ago, the oldest 'older' by role "batch" 3h0m0s ago`,
			[]string{"COMMIT PREPARED 'older';", "ROLLBACK PREPARED 'older';", "pg_prepared_xacts"}},
		{"a quote in the gid", []changefeed.Prepared{old}, Warn, "'it''s old'", []string{"ROLLBACK PREPARED 'it''s old';"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{}
			checkPrepared(r, "app", tt.prepared)
			c := want(t, r, "postgres.prepared_xacts", "", tt.status, tt.fix...)
			if !strings.Contains(c.Detail, tt.detail) {
				t.Errorf("detail %q, want it to hold %q", c.Detail, tt.detail)
			}
		})
	}
}
