package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Load returns the header and every event of the session with id, in seq
// order, read from one consistent snapshot. Event types are returned as
// stored, known or not; Data and SurfaceOp are the bytes that were
// appended, nil when none were. An id the store does not hold yields an
// error wrapping persistence.ErrNotFound.
func (s *Store) Load(ctx context.Context, id string) (*persistence.Log, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("sqlite: load session %q: %w", id, ErrClosed)
	}
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: load session %q: begin: %w", id, err)
	}
	defer tx.Rollback() // read-only; nothing to undo

	h, err := scanHeader(tx.QueryRowContext(ctx, `SELECT `+headerColumns+` FROM sessions AS s WHERE s.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: load session %q: %w", id, persistence.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: load session %q: stored header: %w", id, err)
	}

	var count int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE session_id = ?`, id).Scan(&count); err != nil {
		return nil, fmt.Errorf("sqlite: load session %q: count events: %w", id, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, type, time, data, ignorable, source_event_seqs, surface_op
		FROM events WHERE session_id = ? ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: load session %q: query events: %w", id, err)
	}
	defer rows.Close()

	events := make([]persistence.Event, 0, count)
	for rows.Next() {
		var (
			e                        persistence.Event
			data, sources, surfaceOp []byte
		)
		if err := rows.Scan(&e.Seq, &e.Type, &e.Time, &data, &e.Ignorable, &sources, &surfaceOp); err != nil {
			return nil, fmt.Errorf("sqlite: load session %q: read event: %w", id, err)
		}
		e.Data, e.SurfaceOp = data, surfaceOp
		if sources != nil {
			if err := json.Unmarshal(sources, &e.SourceEventSeqs); err != nil {
				return nil, fmt.Errorf("sqlite: load session %q: event seq %d: column source_event_seqs: %w", id, e.Seq, err)
			}
		}
		if want := int64(len(events)); e.Seq != want {
			return nil, fmt.Errorf("sqlite: load session %q: stored event seq %d, want %d: %w", id, e.Seq, want, persistence.ErrSeqGap)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: load session %q: read events: %w", id, err)
	}
	return &persistence.Log{Header: h, Events: events}, nil
}

// List returns every stored session, oldest first (by createdAt, then id).
// Location is always the zero value: the store has no per-session file.
func (s *Store) List(ctx context.Context) ([]persistence.Info, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("sqlite: list sessions: %w", ErrClosed)
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT `+headerColumns+` FROM sessions AS s ORDER BY s.created_at, s.id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	defer rows.Close()

	var infos []persistence.Info
	for rows.Next() {
		h, err := scanHeader(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list sessions: stored header: %w", err)
		}
		infos = append(infos, persistence.Info{Header: h})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	return infos, nil
}

// headerColumns are the header's columns of sessions (aliased s), in the
// order scanHeader reads them.
const headerColumns = `s.id, s.version, s.created_at, s.cwd, s.parent_session, s.seed_length, s.origin, s.delegation_depth, s.agent_preset`

// scanHeader reads a header from a row of headerColumns (then extra) and
// validates it as dsh does when it restores a session: version 0, a
// non-negative safe createdAt, the optional fields well formed. NULL is an
// absent field; an absent delegation_depth is 0.
func scanHeader(row interface{ Scan(...any) error }, extra ...any) (session.Header, error) {
	var (
		h                           session.Header
		version                     int64
		cwd, parent, origin, preset sql.NullString
		seed, depth                 sql.NullInt64
	)
	dest := append([]any{&h.ID, &version, &h.CreatedAt, &cwd, &parent, &seed, &origin, &depth, &preset}, extra...)
	if err := row.Scan(dest...); err != nil {
		return session.Header{}, err
	}
	if version != session.Version {
		return session.Header{}, &session.FieldError{Field: "version", Reason: fmt.Sprintf("%d is not supported (only %d)", version, session.Version), Err: session.ErrUnsupportedVersion}
	}
	h.Cwd, h.ParentSession, h.Origin, h.AgentPreset = cwd.String, parent.String, origin.String, preset.String
	h.EmptyParentSession = parent.Valid && parent.String == ""
	h.EmptyAgentPreset = preset.Valid && preset.String == ""
	if cwd.Valid && cwd.String == "" {
		return session.Header{}, &session.FieldError{Field: "cwd", Reason: "must be an absolute path when present"}
	}
	if origin.Valid && origin.String != session.OriginSubagent {
		return session.Header{}, &session.FieldError{Field: "origin", Reason: fmt.Sprintf("must be %q when present, got %q", session.OriginSubagent, origin.String)}
	}
	if seed.Valid {
		n := seed.Int64
		h.SeedLength = &n
	}
	h.DelegationDepth = int(depth.Int64)
	if depth.Int64 < 0 || depth.Int64 > 1<<53-1 {
		return session.Header{}, &session.FieldError{Field: "delegationDepth", Reason: "must be a non-negative safe integer"}
	}
	if err := h.Validate(); err != nil {
		return session.Header{}, err
	}
	return h, nil
}
