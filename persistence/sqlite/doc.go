// Package sqlite is the SQLite session store: a persistence.Store that keeps
// every session of a harness in one database file, through the pure-Go
// driver modernc.org/sqlite (no cgo, no database server).
//
// The database holds two STRICT tables, sessions (one row per session,
// with the header's exact JSON) and events (one row per event, keyed by
// session id and seq), and records its schema version in PRAGMA
// user_version. It runs in WAL mode with synchronous=FULL, so every Append
// is durable once it returns and Flush has nothing left to do.
//
// A session stored here has no per-session local file, so Store.Locate
// always answers ok=false and DSH_SESSION_JSONL is not set for it.
//
// The package imports only persistence and session (plus the driver and
// zerolog); the command-line and service wiring above it may import it.
package sqlite
