package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// schemaVersion is the PRAGMA user_version this package writes and reads.
// A database with a higher version was written by a newer build and is
// refused rather than misread.
const schemaVersion = 1

// schemaV1 creates the tables of version 1.
//
// sessions holds one row per session that has appended at least once; header
// is the exact JSON of session.Header.MarshalJSON, the source of truth, and
// cwd, parent_session and created_at copy header fields for queries.
//
// events holds one row per event. data and surface_op are the event's raw
// JSON (NULL when absent), source_event_seqs a JSON array of integers (NULL
// when empty), ignorable 0 or 1.
var schemaV1 = []string{
	`CREATE TABLE sessions (
		id             TEXT    NOT NULL PRIMARY KEY,
		header         TEXT    NOT NULL,
		cwd            TEXT,
		parent_session TEXT,
		created_at     INTEGER NOT NULL
	) STRICT`,
	`CREATE TABLE events (
		session_id        TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
		seq               INTEGER NOT NULL CHECK (seq >= 0),
		type              TEXT    NOT NULL CHECK (type <> ''),
		time              INTEGER NOT NULL,
		data              TEXT,
		ignorable         INTEGER NOT NULL DEFAULT 0 CHECK (ignorable IN (0, 1)),
		source_event_seqs TEXT,
		surface_op        TEXT,
		PRIMARY KEY (session_id, seq)
	) STRICT`,
	fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion),
}

// migrate brings the database to schemaVersion inside one IMMEDIATE
// transaction, so two processes opening a new file at once create the
// schema exactly once.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin schema transaction: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit

	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read user_version: %w", err)
	}
	switch {
	case version == schemaVersion:
		return nil
	case version > schemaVersion:
		return fmt.Errorf("schema version (user_version) %d is newer than %d, the newest this build knows", version, schemaVersion)
	case version != 0:
		return fmt.Errorf("schema version (user_version) %d is unknown", version)
	}

	var tables int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&tables); err != nil {
		return fmt.Errorf("inspect schema: %w", err)
	}
	if tables != 0 {
		return fmt.Errorf("the file holds %d schema objects but no dsh-sandbox schema (user_version 0); refusing to add tables to it", tables)
	}
	for _, stmt := range schemaV1 {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create schema version %d: %w", schemaVersion, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit schema version %d: %w", schemaVersion, err)
	}
	return nil
}
