// Package persistence is the contract between the harness and a session
// store: lazily create a session's log, append events, flush them durably,
// load a log back (header and events), list sessions, and Locate a
// session's transcript file without any I/O.
//
// The stores live in the subpackages jsonl and sqlite. This package imports
// only session; everything above it may import it.
package persistence

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// KindJSONL is Location.Kind for a dsh JSONL transcript (plain or zstd).
const KindJSONL = "jsonl"

// Location names the local file that holds a session's transcript.
type Location struct {
	// Kind is the store's format; only KindJSONL exists today.
	Kind string `json:"kind"`
	// Path is the absolute path of the transcript file. The file may not
	// exist yet.
	Path string `json:"path"`
}

// Event is one record of a session log after packed rows are expanded.
type Event struct {
	// Type is the event type, such as "user/message". Unknown types are
	// kept as they are.
	Type string `json:"type"`
	// Seq numbers events from 0 without gaps within a session.
	Seq int64 `json:"seq"`
	// Time is the event time in Unix milliseconds.
	Time int64 `json:"time"`
	// Data is the event payload, kept verbatim by readers; the JSONL
	// store writes it as dsh does (session.JSValue).
	Data json.RawMessage `json:"data"`
	// Ignorable marks an event a reader that rebuilds state may skip even
	// when it does not know the type.
	Ignorable bool `json:"ignorable,omitempty"`
	// SourceEventSeqs and SurfaceOp are optional dsh fields, kept verbatim.
	SourceEventSeqs []int64         `json:"sourceEventSeqs,omitempty"`
	SurfaceOp       json.RawMessage `json:"surfaceOp,omitempty"`
}

// Log is a loaded session: its header and its events in seq order.
type Log struct {
	Header session.Header
	Events []Event
	// Gaps lists where the stored seq jumps forward (events missing, for
	// example cut out by a snapshot tool). Loading keeps every event that
	// is there and reports the gaps here rather than failing, so that no
	// data is lost; a store never writes a gap itself.
	Gaps []SeqGap
}

// SeqGap is a forward jump of seq in a stored log.
type SeqGap struct {
	// Line is the line (or record) where the jump was seen; 0 when the
	// store has no lines.
	Line int64 `json:"line,omitempty"`
	// Want is the seq that should have come; Got the seq that came.
	Want int64 `json:"want"`
	Got  int64 `json:"got"`
}

// Info describes a stored session for List.
type Info struct {
	Header session.Header
	// Location is the transcript file when the store has one; the zero
	// value otherwise.
	Location Location
}

// Locator answers where a session's transcript lives: the part of a Store
// that the transcript contributor, requests and hook payloads use. Every
// Store is a Locator.
type Locator interface {
	// Locate returns where h's transcript lives, or ok=false when the
	// store has no honest per-session local file. It is synchronous and
	// performs no I/O (DESIGN §3.3): it reads, creates and flushes
	// nothing, so a payload may name a file that does not exist yet.
	Locate(h session.Header) (loc Location, ok bool)
}

// Store is what a session store provides. Implementations are safe for
// concurrent use by many sessions at once.
type Store interface {
	Locator
	// Append queues events for h's log, creating the log lazily on the
	// first append (a session that never appends leaves nothing behind).
	// Each event's Seq must continue the log without a gap.
	Append(ctx context.Context, h session.Header, events ...Event) error
	// Flush makes every event appended so far, for every session, durable.
	Flush(ctx context.Context) error
	// Load reads the header and all events of the session with id.
	Load(ctx context.Context, id string) (*Log, error)
	// List returns the stored sessions.
	List(ctx context.Context) ([]Info, error)
	// Close flushes and releases the store.
	Close() error
}

// ErrNotFound is wrapped by errors for a session the store does not hold.
var ErrNotFound = errors.New("session not found")

// ErrSeqGap is wrapped by errors for events whose seq does not continue
// the log.
var ErrSeqGap = errors.New("event seq does not continue the log")
