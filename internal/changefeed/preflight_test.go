package changefeed

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
)

func TestCheckSlot(t *testing.T) {
	cfg := &Config{Slot: "herald"}
	tests := []struct {
		name      string
		slot      slotState
		permanent bool
		fix       string
	}{
		{"lost", slotState{exists: true, plugin: "pgoutput", slotType: "logical", database: "app", walStatus: "lost"}, true, "pg_drop_replication_slot('herald')"},
		{"two-phase", slotState{exists: true, plugin: "pgoutput", slotType: "logical", database: "app", twoPhase: true}, true, "pg_drop_replication_slot('herald')"},
		{"other plugin", slotState{exists: true, plugin: "wal2json", slotType: "logical", database: "app"}, true, "changefeed.slot"},
		{"other database", slotState{exists: true, plugin: "pgoutput", slotType: "logical", database: "other"}, true, "changefeed.slot"},
		{"active elsewhere", slotState{exists: true, plugin: "pgoutput", slotType: "logical", database: "app", active: true, activePID: "42"}, false, "stop the other consumer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSlot(tt.slot, cfg, "app")
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("checkSlot = %v, want an *Error", err)
			}
			if fe.Permanent != tt.permanent || !strings.Contains(fe.Fix, tt.fix) {
				t.Errorf("got permanent=%v fix=%q, want permanent=%v and a fix with %q", fe.Permanent, fe.Fix, tt.permanent, tt.fix)
			}
		})
	}
	healthy := slotState{exists: true, plugin: "pgoutput", slotType: "logical", database: "app", walStatus: "reserved"}
	if err := checkSlot(healthy, cfg, "app"); err != nil {
		t.Errorf("healthy slot: %v", err)
	}
}

// runOnce runs a feed that must fail preflight, and returns its error.
func runOnce(t *testing.T, cfg Config) *Error {
	t.Helper()
	f, err := New(logTo(t, cfg), newCollector())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = f.Run(ctx)
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("Run = %v, want an *Error", err)
	}
	return fe
}

func TestPreflightFailures(t *testing.T) {
	t.Run("no replication privilege", func(t *testing.T) {
		url := db(t, itemsTable)
		testenv.Exec(t, url, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_norepl') THEN CREATE ROLE herald_norepl LOGIN; END IF; END $$`)
		u := strings.Replace(url, "postgres@", "herald_norepl@", 1)
		fe := runOnce(t, testConfig(u, "items"))
		if fe.Stage != StagePreflight || !strings.Contains(fe.Fix, `ALTER ROLE "herald_norepl" REPLICATION`) {
			t.Errorf("got %v, want a preflight error whose fix grants REPLICATION", fe)
		}
	})
	t.Run("publication misses a table", func(t *testing.T) {
		url := db(t, itemsTable, `CREATE TABLE other (id int PRIMARY KEY)`, `CREATE PUBLICATION herald FOR TABLE items`)
		fe := runOnce(t, testConfig(url, "items", "other"))
		if fe.Stage != StagePublication || !strings.Contains(fe.Fix, `ALTER PUBLICATION "herald" ADD TABLE "public"."other"`) {
			t.Errorf("got %v, want a fix that adds public.other", fe)
		}
	})
	t.Run("publication skips deletes", func(t *testing.T) {
		url := db(t, itemsTable, `CREATE PUBLICATION herald FOR TABLE items WITH (publish = 'insert, update')`)
		fe := runOnce(t, testConfig(url, "items"))
		if !strings.Contains(fe.Detail, "delete, truncate") || !strings.Contains(fe.Fix, "SET (publish") {
			t.Errorf("got %v, want the missing actions named and a SET (publish ...) fix", fe)
		}
	})
	t.Run("table does not exist", func(t *testing.T) {
		url := db(t)
		fe := runOnce(t, testConfig(url, "nosuch"))
		if !strings.Contains(fe.Detail, "public.nosuch does not exist") {
			t.Errorf("got %v, want the missing table named", fe)
		}
	})
	t.Run("full identity required", func(t *testing.T) {
		url := db(t, itemsTable)
		cfg := testConfig(url, "items")
		cfg.FullIdentityTables = []string{"items"}
		fe := runOnce(t, cfg)
		if !strings.Contains(fe.Fix, `ALTER TABLE "public"."items" REPLICA IDENTITY FULL`) {
			t.Errorf("got %v, want the ALTER TABLE ... REPLICA IDENTITY FULL fix", fe)
		}
	})
	t.Run("slot exists with another plugin", func(t *testing.T) {
		url := db(t, itemsTable, `SELECT pg_create_logical_replication_slot(current_database(), 'test_decoding')`)
		fe := runOnce(t, testConfig(url, "items"))
		if fe.Stage != StageSlot || !fe.Permanent {
			t.Errorf("got %v, want a permanent slot error", fe)
		}
	})
}

func TestPublicationIsCreatedBeforeTheSlot(t *testing.T) {
	// pgoutput looks the publication up with each change's historic snapshot, so a slot made
	// before its publication cannot decode changes from before it existed. The feed's own log
	// shows the order in which it made them.
	url := db(t, itemsTable)
	var logs lockedLog
	cfg := testConfig(url, "items")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	f, err := New(cfg, newCollector())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !f.Stats().Streaming && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	out := logs.String()
	pub, slot := strings.Index(out, "created publication"), strings.Index(out, "created replication slot")
	if pub < 0 || slot < 0 || pub > slot {
		t.Errorf("want the publication created before the slot; log:\n%s", out)
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRefusedPreflightLeavesNothingBehind: every check that can refuse runs before Herald
// creates anything. A publication left behind by a refusal is not harmless: once a table
// without a replica identity is published, the application's own UPDATEs and DELETEs on it fail.
func TestRefusedPreflightLeavesNothingBehind(t *testing.T) {
	const nopk = `CREATE TABLE nopk (id int, v text)`
	tests := []struct {
		name   string
		setup  []string
		tables []string
		full   []string
		detail string
	}{
		{"a table has no replica identity", []string{itemsTable, nopk, `INSERT INTO nopk VALUES (1, 'a')`}, []string{"items", "nopk"}, nil, "public.nopk has no replica identity"},
		{"a replica identity index was dropped", []string{itemsTable, `CREATE TABLE idx (id int NOT NULL, v text)`, `CREATE UNIQUE INDEX idx_id ON idx (id)`,
			`ALTER TABLE idx REPLICA IDENTITY USING INDEX idx_id`, `DROP INDEX idx_id`}, []string{"items", "idx"}, nil, "public.idx has no replica identity"},
		{"a table must be full", []string{itemsTable}, []string{"items"}, []string{"items"}, "must be REPLICA IDENTITY FULL"},
		{"a full table is not streamed", []string{itemsTable, `CREATE TABLE other (id int PRIMARY KEY)`, `ALTER TABLE other REPLICA IDENTITY FULL`}, []string{"items"}, []string{"other"}, "is not streamed"},
		{"the slot has another plugin", []string{itemsTable, `SELECT pg_create_logical_replication_slot(current_database(), 'test_decoding')`}, []string{"items"}, nil, "not a logical pgoutput slot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := db(t, tt.setup...)
			cfg := testConfig(url, tt.tables...)
			cfg.FullIdentityTables = tt.full
			fe := runOnce(t, cfg)
			if !fe.Permanent || !strings.Contains(fe.Detail, tt.detail) {
				t.Fatalf("got %v, want a permanent refusal saying %q", fe, tt.detail)
			}
			var pubs, slots int
			c := connect(t, url)
			if err := c.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_publication),
				(SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND plugin = 'pgoutput')`).Scan(&pubs, &slots); err != nil {
				t.Fatal(err)
			}
			if pubs != 0 || slots != 0 {
				t.Errorf("after the refusal: %d publications and %d pgoutput slots, want none", pubs, slots)
			}
			if _, err := c.Exec(context.Background(), `UPDATE items SET n = 1`); err != nil {
				t.Errorf("the application's UPDATE fails after the refusal: %v", err)
			}
			if tt.name == "a table has no replica identity" {
				if _, err := c.Exec(context.Background(), `UPDATE nopk SET v = 'b'`); err != nil {
					t.Errorf("the application's UPDATE fails after the refusal: %v", err)
				}
			}
		})
	}
}
