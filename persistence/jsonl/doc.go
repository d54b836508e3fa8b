// Package jsonl is the dsh-compatible JSONL session store: one append-only
// transcript per session at
// <root>/<projectKey(cwd) or "_no-cwd">/<encodeSegment(id)>/session.jsonl
// (or session.jsonl.zstd), written lazily on the first append, batched
// behind a short delay and made durable by Flush. A transcript is written
// byte for byte as dsh's JSONL store writes it: its header line, event
// lines whose data and surfaceOp are spelled as JSON.stringify spells
// them (session.JSValue), and packed chunk rows (Options.Packed); the
// differential test in interop/dsh compares the two.
//
// It also holds the pieces other layers need without a Store: the path
// encoders (EncodeSegment, DecodeSegment, ProjectKey, Path) and the log
// readers (Scan, ReadFile), which expand packed chunk rows, drop a torn tail
// and refuse corruption elsewhere.
//
// It imports persistence and session (and zstd and zerolog). It is a
// backend: cmd/dsh-sandbox, which picks the store, and the integration
// tests import it; every other layer works through persistence.Store.
package jsonl
