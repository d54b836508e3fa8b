package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestOpenConnectionSettings(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "s.sqlite"), BusyTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	defer s.Close()

	tests := []struct {
		pool   string
		pragma string
		want   string
	}{
		{"writer", "journal_mode", "wal"},
		{"writer", "synchronous", "2"}, // FULL
		{"writer", "foreign_keys", "1"},
		{"writer", "busy_timeout", "1500"},
		{"writer", "user_version", "14"},           // dsh's schema
		{"writer", "application_id", "1146308688"}, // dsh's session store
		{"writer", "query_only", "0"},
		{"reader", "journal_mode", "wal"},
		{"reader", "foreign_keys", "1"},
		{"reader", "busy_timeout", "1500"},
		{"reader", "query_only", "1"},
	}
	for _, tt := range tests {
		db := s.writer
		if tt.pool == "reader" {
			db = s.reader
		}
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatalf("%s: PRAGMA %s = %v", tt.pool, tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("%s: PRAGMA %s = %q, want %q", tt.pool, tt.pragma, got, tt.want)
		}
	}
}

// TestSchemaStrictCase: dsh's STRICT tables refuse mistyped values, and
// the ignorable column dsh-sandbox adds accepts only 0 and 1.
func TestSchemaStrictCase(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "s.sqlite")})
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	defer s.Close()
	if _, err := s.writer.ExecContext(ctx, `INSERT INTO sessions (id, version, created_at, incarnation, revision) VALUES ('s', 0, 0, 'i', 0)`); err != nil {
		t.Fatalf("insert session row = %v", err)
	}
	if _, err := s.writer.ExecContext(ctx, `INSERT INTO events (session_id, seq, type, time, data) VALUES ('s', 0, 't', 0, '{}')`); err != nil {
		t.Fatalf("insert event row as dsh does (no ignorable column named) = %v", err)
	}
	tests := []struct {
		name string
		stmt string
	}{
		{"text seq", `INSERT INTO events (session_id, seq, type, time, data) VALUES ('s', 'one', 't', 0, '{}')`},
		{"blob data", `INSERT INTO events (session_id, seq, type, time, data) VALUES ('s', 1, 't', 0, x'7b7d')`},
		{"no data", `INSERT INTO events (session_id, seq, type, time) VALUES ('s', 1, 't', 0)`},
		{"ignorable 2", `INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES ('s', 1, 't', 0, '{}', 2)`},
		{"unknown session", `INSERT INTO events (session_id, seq, type, time, data) VALUES ('nope', 0, 't', 0, '{}')`},
		{"text created_at", `INSERT INTO sessions (id, version, created_at, incarnation, revision) VALUES ('t', 0, 'now', 'i', 0)`},
		{"no incarnation", `INSERT INTO sessions (id, version, created_at, revision) VALUES ('t', 0, 0, 0)`},
		{"second identity", `INSERT INTO persistence_state (singleton, store_id) VALUES (2, 'x')`},
	}
	for _, tt := range tests {
		if _, err := s.writer.ExecContext(ctx, tt.stmt); err == nil {
			t.Errorf("exec(%s) = nil error, want a constraint error", tt.name)
		}
	}
	if _, err := s.reader.ExecContext(ctx, `DELETE FROM sessions`); err == nil {
		t.Errorf("exec(DELETE on a reader connection) = nil error, want a query_only error")
	}
}
