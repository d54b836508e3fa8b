package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"
)

// schemaVersion and applicationID are the PRAGMA user_version and
// application_id of dsh's SQLite store (@deepseek-ai/dsh-session-persistence-sqlite),
// whose schema this package writes and reads: a database either side
// creates is the other's too.
const (
	schemaVersion = 14
	applicationID = 1146308688
)

// schema creates dsh's tables, exactly as dsh does.
//
// persistence_state holds the store's random identity. sessions holds one
// row per session that has appended at least once: the header's fields
// as columns (NULL for an absent optional field), a random incarnation and
// a revision that every committed batch increments. events holds one row
// per event: data, source_event_seqs and surface_op as JSON text.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS persistence_state (
		singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
		store_id  TEXT NOT NULL
	) STRICT`,
	`CREATE TABLE IF NOT EXISTS sessions (
		id               TEXT PRIMARY KEY,
		version          INTEGER NOT NULL,
		created_at       INTEGER NOT NULL,
		cwd              TEXT,
		parent_session   TEXT,
		seed_length      INTEGER,
		origin           TEXT,
		delegation_depth INTEGER,
		agent_preset     TEXT,
		incarnation      TEXT NOT NULL,
		revision         INTEGER NOT NULL
	) STRICT`,
	`CREATE TABLE IF NOT EXISTS events (
		session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
		seq               INTEGER NOT NULL,
		type              TEXT NOT NULL,
		time              INTEGER NOT NULL,
		data              TEXT NOT NULL,
		source_event_seqs TEXT,
		surface_op        TEXT,
		PRIMARY KEY (session_id, seq)
	) STRICT`,
}

// ignorableColumn is the one column dsh-sandbox adds to dsh's schema: dsh
// does not store an event's ignorable flag (it reads every event back
// without it), so dsh-sandbox keeps it here. dsh names its columns in
// every statement, so the extra column changes nothing for dsh.
const ignorableColumn = `ALTER TABLE events ADD COLUMN ignorable INTEGER NOT NULL DEFAULT 0 CHECK (ignorable IN (0, 1))`

// migrate brings db to dsh's schema as dsh does: a new, empty database
// gets the tables, user_version 14 and dsh's application_id; a database at
// version 14 must carry that application_id. Anything else (another
// version, or an unversioned file that holds tables, such as a database of
// dsh-sandbox's earlier schema 1) is refused rather than misread. Both
// also get the ignorable column when it is missing.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin schema transaction: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit

	version, err := checkVersion(ctx, tx)
	if err != nil {
		return err
	}
	if err := createSchema(ctx, tx); err != nil {
		return err
	}
	if err := addIgnorableColumn(ctx, tx); err != nil {
		return err
	}
	if version == 0 {
		if err := stampVersion(ctx, tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit schema version %d: %w", schemaVersion, err)
	}
	return nil
}

// checkVersion returns the database's user_version: 0 for a new, empty
// database or schemaVersion for one of dsh's. Any other version, an
// unversioned file that holds tables, or a version-14 file without dsh's
// application_id is refused.
func checkVersion(ctx context.Context, tx *sql.Tx) (int, error) {
	var version, appID, objects int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("read user_version: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return 0, fmt.Errorf("read application_id: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*'").Scan(&objects); err != nil {
		return 0, fmt.Errorf("inspect schema: %w", err)
	}
	switch {
	case version == 0 && (appID != 0 || objects > 0):
		return 0, fmt.Errorf("the file holds %d schema objects (application_id %d) but no dsh session schema (user_version 0); refusing to add tables to it", objects, appID)
	case version != 0 && version != schemaVersion:
		return 0, fmt.Errorf("schema version (user_version) %d is not dsh's session schema %d", version, schemaVersion)
	case version == schemaVersion && appID != applicationID:
		return 0, fmt.Errorf("application_id %d is not dsh's session store (%d)", appID, applicationID)
	}
	return version, nil
}

// createSchema creates dsh's tables where missing and gives the store
// its random identity unless it has one.
func createSchema(ctx context.Context, tx *sql.Tx) error {
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create schema version %d: %w", schemaVersion, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO persistence_state (singleton, store_id) VALUES (1, ?)`, uuid.NewString()); err != nil {
		return fmt.Errorf("store identity: %w", err)
	}
	return nil
}

// addIgnorableColumn adds ignorableColumn to the events table unless it
// is there.
func addIgnorableColumn(ctx context.Context, tx *sql.Tx) error {
	var hasIgnorable int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('events') WHERE name = 'ignorable'`).Scan(&hasIgnorable); err != nil {
		return fmt.Errorf("inspect events: %w", err)
	}
	if hasIgnorable == 0 {
		if _, err := tx.ExecContext(ctx, ignorableColumn); err != nil {
			return fmt.Errorf("add column events.ignorable: %w", err)
		}
	}
	return nil
}

// stampVersion marks a new database as dsh's: its application_id and
// user_version.
func stampVersion(ctx context.Context, tx *sql.Tx) error {
	for _, pragma := range []string{fmt.Sprintf("PRAGMA application_id = %d", applicationID), fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)} {
		if _, err := tx.ExecContext(ctx, pragma); err != nil {
			return fmt.Errorf("%s: %w", pragma, err)
		}
	}
	return nil
}
