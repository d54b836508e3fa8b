package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// ErrHeaderConflict is wrapped by the error of an Append whose header has
// the id of a stored session but differs from its stored header: two
// sessions with one id, which the store refuses to mix.
var ErrHeaderConflict = errors.New("session header differs from the stored header with the same id")

// eventRow is an event in the form its columns are bound: text columns as
// strings (a []byte would bind as a BLOB, which STRICT tables refuse) and
// absent optional values as nil (NULL).
type eventRow struct {
	seq, time       int64
	typ             string
	data, surfaceOp any
	ignorable       int
	sourceEventSeqs any
}

// Append validates h and events and stores the events in one transaction,
// creating the session's row on its first append. An empty events list
// validates h and stores nothing, so a session that never appends leaves no
// trace. The first event's Seq must be one past the last stored one (0 for
// a new session) and the rest must follow it without a gap; otherwise the
// error wraps persistence.ErrSeqGap and nothing is stored. Event Data and
// SurfaceOp must be valid JSON when present; they are stored verbatim.
// The events are durable when Append returns nil.
func (s *Store) Append(ctx context.Context, h session.Header, events ...persistence.Event) error {
	if err := h.Validate(); err != nil {
		return fmt.Errorf("sqlite: append: %w", err)
	}
	rows, err := eventRows(h.ID, events)
	if err != nil || len(rows) == 0 {
		return err
	}
	if s.closed.Load() {
		return fmt.Errorf("sqlite: append to session %q: %w", h.ID, ErrClosed)
	}

	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: append to session %q: begin: %w", h.ID, err)
	}
	defer tx.Rollback() // a no-op after Commit

	next, err := nextSeq(ctx, tx, h)
	if err != nil {
		return err
	}
	if rows[0].seq != next {
		return fmt.Errorf("sqlite: append to session %q: first event seq %d, want %d: %w",
			h.ID, rows[0].seq, next, persistence.ErrSeqGap)
	}

	stmt, err := tx.PrepareContext(ctx, `INSERT INTO events
		(session_id, seq, type, time, data, ignorable, source_event_seqs, surface_op)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("sqlite: append to session %q: prepare: %w", h.ID, err)
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, h.ID, r.seq, r.typ, r.time, r.data, r.ignorable, r.sourceEventSeqs, r.surfaceOp); err != nil {
			return fmt.Errorf("sqlite: append to session %q: insert event seq %d: %w", h.ID, r.seq, err)
		}
	}
	// dsh's revision: every committed batch counts.
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET revision = revision + 1 WHERE id = ?`, h.ID); err != nil {
		return fmt.Errorf("sqlite: append to session %q: revision: %w", h.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: append to session %q: commit: %w", h.ID, err)
	}
	s.log.Debug().Str("session", h.ID).Int64("seq", rows[0].seq).Int("events", len(rows)).Msg("events appended")
	return nil
}

// nextSeq returns the seq the next event of h's session must have, creating
// the session's row when it is missing and refusing a header that differs
// from the stored one.
func nextSeq(ctx context.Context, tx *sql.Tx, h session.Header) (int64, error) {
	var last sql.NullInt64
	stored, err := scanHeader(tx.QueryRowContext(ctx, `SELECT `+headerColumns+`,
		(SELECT max(e.seq) FROM events AS e WHERE e.session_id = s.id)
		FROM sessions AS s WHERE s.id = ?`, h.ID), &last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var seed any
		if h.SeedLength != nil {
			seed = *h.SeedLength
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO sessions
			(id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)`,
			h.ID, session.Version, h.CreatedAt, nullString(h.Cwd), optionalString(h.ParentSession, h.EmptyParentSession), seed,
			nullString(h.Origin), h.DelegationDepth, optionalString(h.AgentPreset, h.EmptyAgentPreset), uuid.NewString())
		if err != nil {
			return 0, fmt.Errorf("sqlite: append to session %q: create session: %w", h.ID, err)
		}
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("sqlite: append to session %q: read session: %w", h.ID, err)
	case !sameHeader(stored, h):
		return 0, fmt.Errorf("sqlite: append to session %q: header %+v, stored %+v: %w", h.ID, h, stored, ErrHeaderConflict)
	case !last.Valid:
		return 0, nil
	}
	return last.Int64 + 1, nil
}

// sameHeader reports whether a and b are the same header.
func sameHeader(a, b session.Header) bool {
	seed := func(h session.Header) int64 {
		if h.SeedLength == nil {
			return -1
		}
		return *h.SeedLength
	}
	sa, sb := seed(a), seed(b)
	a.SeedLength, b.SeedLength = nil, nil
	return a == b && sa == sb
}

// eventRows checks that events are well formed and numbered without a gap
// among themselves, and converts them to their column values.
func eventRows(id string, events []persistence.Event) ([]eventRow, error) {
	rows := make([]eventRow, len(events))
	for i, e := range events {
		if i > 0 && e.Seq != events[0].Seq+int64(i) {
			return nil, fmt.Errorf("sqlite: append to session %q: event %d of the batch has seq %d, want %d: %w",
				id, i, e.Seq, events[0].Seq+int64(i), persistence.ErrSeqGap)
		}
		if e.Type == "" {
			return nil, fmt.Errorf("sqlite: append to session %q: event seq %d: field \"type\" is empty", id, e.Seq)
		}
		r := eventRow{seq: e.Seq, time: e.Time, typ: e.Type}
		var err error
		if len(e.Data) == 0 {
			return nil, fmt.Errorf("sqlite: append to session %q: event seq %d: field \"data\" is required (use null for no payload)", id, e.Seq)
		}
		if r.data, err = rawJSON(e.Data); err != nil {
			return nil, fmt.Errorf("sqlite: append to session %q: event seq %d: field \"data\": %w", id, e.Seq, err)
		}
		if r.surfaceOp, err = rawJSON(e.SurfaceOp); err != nil {
			return nil, fmt.Errorf("sqlite: append to session %q: event seq %d: field \"surfaceOp\": %w", id, e.Seq, err)
		}
		if e.Ignorable {
			r.ignorable = 1
		}
		if len(e.SourceEventSeqs) > 0 {
			b, err := json.Marshal(e.SourceEventSeqs)
			if err != nil { // cannot happen for []int64
				return nil, fmt.Errorf("sqlite: append to session %q: event seq %d: field \"sourceEventSeqs\": %w", id, e.Seq, err)
			}
			r.sourceEventSeqs = string(b)
		}
		rows[i] = r
	}
	return rows, nil
}

// rawJSON returns raw as a string to bind, spelled as dsh writes it
// (session.JSValue: what JSON.stringify makes of the parsed value), nil
// (NULL) when it is empty, and an error when it is not valid JSON.
func rawJSON(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out, err := session.JSValue(raw)
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	return string(out), nil
}

func nullString(s string) any {
	return optionalString(s, false)
}

// optionalString is s, or NULL when s is empty and not kept (keepEmpty:
// the header carried the key with "", which dsh stores as "").
func optionalString(s string, keepEmpty bool) any {
	if s == "" && !keepEmpty {
		return nil
	}
	return s
}
