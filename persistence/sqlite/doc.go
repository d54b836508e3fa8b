// Package sqlite is the SQLite session store: a persistence.Store that keeps
// every session of a harness in one database file, through the pure-Go
// driver modernc.org/sqlite (no cgo, no database server).
//
// The database is dsh's own (@deepseek-ai/dsh-session-persistence-sqlite,
// schema 14, PRAGMA application_id 1146308688): STRICT tables
// persistence_state (the store's identity), sessions (one row per session,
// the header's fields as columns) and events (one row per event, keyed by
// session id and seq), so dsh reads what this package writes and the other
// way round. The one addition is events.ignorable, which dsh does not
// store (docs/dsh-compatibility.md). It runs in WAL mode with
// synchronous=FULL, so every Append is durable once it returns and Flush
// has nothing left to do.
//
// A session stored here has no per-session local file, so Store.Locate
// always answers ok=false and DSH_SESSION_JSONL is not set for it.
//
// The package imports only persistence and session (plus the driver and
// zerolog); the command-line and service wiring above it may import it.
package sqlite
