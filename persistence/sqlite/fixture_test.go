package sqlite_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// wireEvent is one event line of a dsh JSONL log, plain or packed.
type wireEvent struct {
	Type            string          `json:"type"`
	Seq             *int64          `json:"seq"`
	Time            *int64          `json:"time"`
	Seq0            *int64          `json:"seq0"`
	Time0           *int64          `json:"time0"`
	Data            json.RawMessage `json:"data"`
	Ignorable       bool            `json:"ignorable"`
	SourceEventSeqs []int64         `json:"sourceEventSeqs"`
	SurfaceOp       json.RawMessage `json:"surfaceOp"`
}

// packedData is the data of a packed *-chunks row.
type packedData struct {
	Turn  json.RawMessage `json:"turn"`
	Step  json.RawMessage `json:"step"`
	Index json.RawMessage `json:"index"`
	Dt    []int64         `json:"dt"`
	Texts []string        `json:"texts"`
	Args  []string        `json:"args"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
}

// chunkDelta is the chunk of an expanded assistant/chunk event. The field
// set mirrors the unpacked delta chunks found in the fixtures; it is a
// simple expansion for these tests, not the JSONL reader's.
type chunkDelta struct {
	Type           string          `json:"type"`
	Index          json.RawMessage `json:"index"`
	ID             string          `json:"id,omitempty"`
	Name           string          `json:"name,omitempty"`
	Text           *string         `json:"text,omitempty"`
	ArgumentsDelta *string         `json:"argumentsDelta,omitempty"`
}

// readFixture reads a dsh JSONL log: the header through session.Parse,
// its id replaced by id (so that two logs of one session, as turns.jsonl
// and resumed.jsonl are, can be stored side by side), and the events
// through encoding/json, packed rows expanded to one assistant/chunk
// event per member.
func readFixture(t testing.TB, path, id string) (session.Header, []persistence.Event) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("os.Open(%q) = %v", path, err)
	}
	defer f.Close()
	r := bufio.NewReader(f)

	line, err := r.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read header of %s: %v", path, err)
	}
	h, err := session.Parse(bytes.TrimSpace(line))
	if err != nil {
		t.Fatalf("session.Parse(header of %s) = %v", path, err)
	}
	h.ID = id

	var events []persistence.Event
	for n := 2; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			expanded, perr := decodeEventLine(line)
			if perr != nil {
				t.Fatalf("%s:%d: %v", path, n, perr)
			}
			events = append(events, expanded...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
	}
	return h, events
}

func decodeEventLine(line []byte) ([]persistence.Event, error) {
	var w wireEvent
	if err := json.Unmarshal(line, &w); err != nil {
		return nil, err
	}
	if w.Seq0 != nil {
		return expandPacked(w)
	}
	if w.Seq == nil || w.Time == nil {
		return nil, fmt.Errorf("event %q lacks seq or time", w.Type)
	}
	return []persistence.Event{{
		Type: w.Type, Seq: *w.Seq, Time: *w.Time, Data: w.Data,
		Ignorable: w.Ignorable, SourceEventSeqs: w.SourceEventSeqs, SurfaceOp: w.SurfaceOp,
	}}, nil
}

func expandPacked(w wireEvent) ([]persistence.Event, error) {
	if w.Time0 == nil {
		return nil, fmt.Errorf("packed row %q lacks time0", w.Type)
	}
	var p packedData
	if err := json.Unmarshal(w.Data, &p); err != nil {
		return nil, fmt.Errorf("packed row %q: %v", w.Type, err)
	}
	members, deltaType := p.Texts, ""
	switch w.Type {
	case "text-chunks":
		deltaType = "text-delta"
	case "reasoning-chunks":
		deltaType = "reasoning-delta"
	case "tool-call-chunks":
		deltaType, members = "tool-call-delta", p.Args
	default:
		return nil, fmt.Errorf("unknown packed row type %q", w.Type)
	}
	events := make([]persistence.Event, len(members))
	t := *w.Time0
	for k, m := range members {
		if k > 0 && k-1 < len(p.Dt) {
			t += p.Dt[k-1]
		}
		c := chunkDelta{Type: deltaType, Index: p.Index}
		if w.Type == "tool-call-chunks" {
			c.ID, c.Name, c.ArgumentsDelta = p.ID, p.Name, &m
		} else {
			c.Text = &m
		}
		data, err := json.Marshal(struct {
			Turn  json.RawMessage `json:"turn"`
			Step  json.RawMessage `json:"step"`
			Chunk chunkDelta      `json:"chunk"`
		}{p.Turn, p.Step, c})
		if err != nil {
			return nil, err
		}
		events[k] = persistence.Event{Type: "assistant/chunk", Seq: *w.Seq0 + int64(k), Time: t, Data: data}
	}
	return events, nil
}
