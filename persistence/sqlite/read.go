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

	var header []byte
	err = tx.QueryRowContext(ctx, `SELECT header FROM sessions WHERE id = ?`, id).Scan(&header)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: load session %q: %w", id, persistence.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: load session %q: %w", id, err)
	}
	h, err := session.Parse(header)
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
	rows, err := s.reader.QueryContext(ctx, `SELECT id, header FROM sessions ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	defer rows.Close()

	var infos []persistence.Info
	for rows.Next() {
		var (
			id     string
			header []byte
		)
		if err := rows.Scan(&id, &header); err != nil {
			return nil, fmt.Errorf("sqlite: list sessions: %w", err)
		}
		h, err := session.Parse(header)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list sessions: session %q: stored header: %w", id, err)
		}
		infos = append(infos, persistence.Info{Header: h})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	return infos, nil
}
