package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/sqlite"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

func openStore(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatalf("Open(%q) = %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t testing.TB) *sqlite.Store {
	t.Helper()
	return openStore(t, filepath.Join(t.TempDir(), "sessions.sqlite"))
}

func testHeader(id string) session.Header {
	return session.Header{ID: id, CreatedAt: 1785403668101, Cwd: "/srv/project"}
}

// makeEvents returns n events numbered from first.
func makeEvents(first int64, n int) []persistence.Event {
	events := make([]persistence.Event, n)
	for i := range events {
		seq := first + int64(i)
		events[i] = persistence.Event{
			Type: "user/message",
			Seq:  seq,
			Time: 1785403668200 + seq,
			Data: json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"message %d <&>"}]}`, seq)),
		}
	}
	return events
}

// diffEvents describes the first difference between got and want, or
// returns "" when they are equal. Empty and nil slices count as equal.
// diffEvents compares events; data and surfaceOp are stored as dsh spells
// them (session.JSValue), so want's are compared in that spelling.
func diffEvents(got, want []persistence.Event) string {
	dsh := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return nil
		}
		out, err := session.JSValue(raw)
		if err != nil {
			return raw
		}
		return out
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		w.Data, w.SurfaceOp = dsh(w.Data), dsh(w.SurfaceOp)
		switch {
		case g.Type != w.Type || g.Seq != w.Seq || g.Time != w.Time || g.Ignorable != w.Ignorable:
			return fmt.Sprintf("event %d = {%q seq %d time %d ignorable %v}, want {%q seq %d time %d ignorable %v}",
				i, g.Type, g.Seq, g.Time, g.Ignorable, w.Type, w.Seq, w.Time, w.Ignorable)
		case !bytes.Equal(g.Data, w.Data) || (g.Data == nil) != (w.Data == nil):
			return fmt.Sprintf("event %d data = %q, want %q", i, g.Data, w.Data)
		case !bytes.Equal(g.SurfaceOp, w.SurfaceOp) || (g.SurfaceOp == nil) != (w.SurfaceOp == nil):
			return fmt.Sprintf("event %d surfaceOp = %q, want %q", i, g.SurfaceOp, w.SurfaceOp)
		case !slices.Equal(g.SourceEventSeqs, w.SourceEventSeqs):
			return fmt.Sprintf("event %d sourceEventSeqs = %v, want %v", i, g.SourceEventSeqs, w.SourceEventSeqs)
		}
	}
	return ""
}

func TestOpenInvalidOptionsCase(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		opts  sqlite.Options
		field string
	}{
		{"empty path", sqlite.Options{}, "Path"},
		{"relative path", sqlite.Options{Path: "sessions.sqlite"}, "Path"},
		{"dot path", sqlite.Options{Path: "./x/sessions.sqlite"}, "Path"},
		{"negative busy timeout", sqlite.Options{Path: filepath.Join(dir, "s.sqlite"), BusyTimeout: -time.Second}, "BusyTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sqlite.Open(context.Background(), tt.opts)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%+v) = nil error, want an error naming %s", tt.opts, tt.field)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Open(%+v) = %v, want an error naming %s", tt.opts, err, tt.field)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("invalid options left %d entries in the directory, want 0", len(entries))
	}
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	root := t.TempDir()
	// A name with URI-special characters checks that the path survives the
	// file: URI the driver is given.
	parent := filepath.Join(root, "a b?c#d%20", "nested")
	path := filepath.Join(parent, "sessions.sqlite")
	s := openStore(t, path)
	if err := s.Append(context.Background(), testHeader("s1"), makeEvents(0, 3)...); err != nil {
		t.Fatalf("Append() = %v", err)
	}

	for _, dir := range []string{parent, filepath.Dir(parent)} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatalf("os.Stat(%q) = %v", dir, err)
		}
		if got := fi.Mode().Perm(); got != 0o700 {
			t.Errorf("mode of created directory %q = %v, want %v", dir, got, fs.FileMode(0o700))
		}
	}
	for _, f := range []string{path, path + "-wal"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("os.Stat(%q) = %v", f, err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("mode of %q = %v, want %v", filepath.Base(f), got, fs.FileMode(0o600))
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "a b?c#d%20" {
		t.Errorf("entries of the root = %v, want only %q (the path must not be mangled)", entries, "a b?c#d%20")
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sessions.sqlite")
	s := openStore(t, path)
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = sqlite.Open(context.Background(), sqlite.Options{Path: path})
	if err == nil {
		s.Close()
		t.Fatalf("Open(database with user_version 99) = nil error, want a schema version error")
	}
	if !strings.Contains(err.Error(), "99") {
		t.Errorf("Open(database with user_version 99) = %v, want an error naming version 99", err)
	}
}

// TestOpenRefusesOtherSchemasCase: only dsh's schema 14 with dsh's
// application_id is read, never misread: dsh-sandbox's earlier schema 1
// and a version-14 file of another application are refused, while an
// empty file gets dsh's schema.
func TestOpenRefusesOtherSchemasCase(t *testing.T) {
	for _, tt := range []struct{ name, stmts, want string }{
		{"dsh-sandbox schema 1", "CREATE TABLE sessions (id TEXT); PRAGMA user_version = 1", "user_version) 1"},
		{"another application", "PRAGMA user_version = 14; PRAGMA application_id = 7", "application_id 7"},
		{"unversioned tables", "CREATE TABLE sessions (id TEXT)", "no dsh session schema"},
	} {
		path := filepath.Join(t.TempDir(), "s.sqlite")
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(tt.stmts); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path})
		if err == nil {
			s.Close()
			t.Errorf("Open(%s) = nil error, want a refusal", tt.name)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%s) = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.sqlite")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: empty})
	if err != nil {
		t.Fatalf("Open(empty file) = %v", err)
	}
	s.Close()
}

func TestOpenRefusesForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.sqlite")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE notes (body TEXT)"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path})
	if err == nil {
		s.Close()
		t.Fatalf("Open(foreign database) = nil error, want a refusal")
	}
}

func TestRoundTripFixtures(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	names := []string{
		"turns.jsonl",    // text/reasoning/tool-call chunk rows, surfaceOp, sourceEventSeqs
		"resumed.jsonl",  // a resumed session's second turn
		"preset.jsonl",   // agentPreset
		"no-cwd.jsonl",   // no cwd
		"forked.jsonl",   // parentSession, seedLength, session/end-seed
		"subagent.jsonl", // origin, delegationDepth 1
	}
	s := newStore(t)
	ctx := context.Background()
	want := map[string]session.Header{}
	wantEvents := map[string][]persistence.Event{}
	for i, name := range names {
		h, events := readFixture(t, filepath.Join(dir, name), fmt.Sprintf("fixture-%02d", i))
		if _, dup := want[h.ID]; dup {
			t.Fatalf("fixture %s reuses session id %q", name, h.ID)
		}
		want[h.ID], wantEvents[h.ID] = h, events
		// Append in batches of growing size so that later batches must
		// continue what earlier transactions stored.
		for start, size := 0, 1; start < len(events); start, size = start+size, size*2 {
			end := min(start+size, len(events))
			if err := s.Append(ctx, h, events[start:end]...); err != nil {
				t.Fatalf("%s: Append(events %d..%d) = %v", name, start, end-1, err)
			}
		}
	}

	for id, h := range want {
		log, err := s.Load(ctx, id)
		if len(wantEvents[id]) == 0 {
			if !errors.Is(err, persistence.ErrNotFound) {
				t.Errorf("Load(%q) of a session without events = %v, want ErrNotFound", id, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Load(%q) = %v", id, err)
		}
		if !reflect.DeepEqual(log.Header, h) {
			t.Errorf("Load(%q).Header = %+v, want %+v", id, log.Header, h)
		}
		if d := diffEvents(log.Events, wantEvents[id]); d != "" {
			t.Errorf("Load(%q).Events: %s", id, d)
		}
	}

	infos, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List() = %v", err)
	}
	withEvents := 0
	for _, events := range wantEvents {
		if len(events) > 0 {
			withEvents++
		}
	}
	if len(infos) != withEvents {
		t.Fatalf("List() returned %d sessions, want %d", len(infos), withEvents)
	}
	for i, info := range infos {
		if !reflect.DeepEqual(info.Header, want[info.Header.ID]) {
			t.Errorf("List()[%d].Header = %+v, want %+v", i, info.Header, want[info.Header.ID])
		}
		if info.Location != (persistence.Location{}) {
			t.Errorf("List()[%d].Location = %+v, want the zero value", i, info.Location)
		}
		if i > 0 && infos[i-1].Header.CreatedAt > info.Header.CreatedAt {
			t.Errorf("List() is not ordered by createdAt at index %d", i)
		}
	}
}

func TestAppendUnknownTypePreserved(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	h := testHeader("unknown-types")
	want := []persistence.Event{
		{Type: "future/thing", Seq: 0, Time: 1, Data: json.RawMessage(`{"x":[1,2,{"y":null}]}`), Ignorable: true},
		{Type: "another/unknown", Seq: 1, Time: 0, Data: json.RawMessage(`null`), SurfaceOp: json.RawMessage(`{"op":"replace","at":3}`), SourceEventSeqs: []int64{0}},
		{Type: "user/message", Seq: 2, Time: 3, Data: json.RawMessage(`"plain \u003c string"`), SurfaceOp: json.RawMessage(`"append"`)},
	}
	if err := s.Append(ctx, h, want...); err != nil {
		t.Fatalf("Append() = %v", err)
	}
	log, err := s.Load(ctx, h.ID)
	if err != nil {
		t.Fatalf("Load(%q) = %v", h.ID, err)
	}
	if d := diffEvents(log.Events, want); d != "" {
		t.Errorf("Load(%q).Events: %s", h.ID, d)
	}
}

func TestLocateNotOK(t *testing.T) {
	s := newStore(t)
	for _, h := range []session.Header{testHeader("s1"), {ID: "no-cwd"}, {}} {
		loc, ok := s.Locate(h)
		if ok || loc != (persistence.Location{}) {
			t.Errorf("Locate(%q) = %+v, %v, want the zero Location, false", h.ID, loc, ok)
		}
	}
	infos, err := s.List(context.Background())
	if err != nil || len(infos) != 0 {
		t.Errorf("List() after Locate = %v, %v, want no sessions", infos, err)
	}
}

func TestAppendLazyCreation(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	h := testHeader("lazy")
	if _, ok := s.Locate(h); ok {
		t.Fatalf("Locate(%q) ok = true, want false", h.ID)
	}
	if err := s.Append(ctx, h); err != nil {
		t.Fatalf("Append(%q, no events) = %v", h.ID, err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() = %v", err)
	}
	if _, err := s.Load(ctx, h.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("Load(%q) before the first event = %v, want ErrNotFound", h.ID, err)
	}
	if infos, err := s.List(ctx); err != nil || len(infos) != 0 {
		t.Errorf("List() before the first event = %v, %v, want no sessions", infos, err)
	}

	if err := s.Append(ctx, h, makeEvents(0, 1)...); err != nil {
		t.Fatalf("Append(%q, seq 0) = %v", h.ID, err)
	}
	log, err := s.Load(ctx, h.ID)
	if err != nil {
		t.Fatalf("Load(%q) = %v", h.ID, err)
	}
	if len(log.Events) != 1 || !reflect.DeepEqual(log.Header, h) {
		t.Errorf("Load(%q) = %+v with %d events, want header %+v with 1 event", h.ID, log.Header, len(log.Events), h)
	}
	if infos, err := s.List(ctx); err != nil || len(infos) != 1 {
		t.Errorf("List() after the first event = %v, %v, want 1 session", infos, err)
	}
}

func TestAppendSeqGapCase(t *testing.T) {
	tests := []struct {
		name    string
		batch   []persistence.Event
		wantSeq string // the seq the error must name
	}{
		{"skips one", makeEvents(4, 1), "4"},
		{"repeats the last", makeEvents(2, 2), "2"},
		{"restarts at zero", makeEvents(0, 1), "0"},
		{"negative", makeEvents(-1, 1), "-1"},
		{"gap inside the batch", append(makeEvents(3, 1), makeEvents(5, 1)...), "5"},
		{"out of order inside the batch", append(makeEvents(4, 1), makeEvents(3, 1)...), "3"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			h := testHeader("gap")
			if err := s.Append(ctx, h, makeEvents(0, 3)...); err != nil {
				t.Fatalf("Append(seq 0..2) = %v", err)
			}
			err := s.Append(ctx, h, tt.batch...)
			if !errors.Is(err, persistence.ErrSeqGap) {
				t.Fatalf("Append(%s) = %v, want ErrSeqGap", tt.name, err)
			}
			if !strings.Contains(err.Error(), "seq "+tt.wantSeq) {
				t.Errorf("Append(%s) = %q, want an error naming seq %s", tt.name, err, tt.wantSeq)
			}
			log, err := s.Load(ctx, h.ID)
			if err != nil {
				t.Fatalf("Load(%q) = %v", h.ID, err)
			}
			if d := diffEvents(log.Events, makeEvents(0, 3)); d != "" {
				t.Errorf("after a refused batch, Load(%q).Events: %s", h.ID, d)
			}
			if err := s.Append(ctx, h, makeEvents(3, 2)...); err != nil {
				t.Errorf("Append(seq 3..4) after a refused batch = %v, want nil", err)
			}
		})
	}
}

func TestAppendNewSessionMustStartAtZero(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	h := testHeader("late-start")
	err := s.Append(ctx, h, makeEvents(1, 2)...)
	if !errors.Is(err, persistence.ErrSeqGap) || !strings.Contains(err.Error(), "seq 1") {
		t.Fatalf("Append(new session, seq 1..2) = %v, want ErrSeqGap naming seq 1", err)
	}
	if _, err := s.Load(ctx, h.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("Load(%q) after a refused first append = %v, want ErrNotFound (no row left behind)", h.ID, err)
	}
}

func TestAppendInvalidInputCase(t *testing.T) {
	valid := makeEvents(0, 1)[0]
	with := func(f func(*persistence.Event)) persistence.Event {
		e := valid
		f(&e)
		return e
	}
	tests := []struct {
		name   string
		header session.Header
		event  persistence.Event
		field  string
	}{
		{"empty id", session.Header{}, valid, `"id"`},
		{"relative cwd", session.Header{ID: "x", Cwd: "rel/dir"}, valid, `"cwd"`},
		{"bad origin", session.Header{ID: "x", Origin: "fork"}, valid, `"origin"`},
		{"empty type", testHeader("x"), with(func(e *persistence.Event) { e.Type = "" }), `"type"`},
		{"bad data", testHeader("x"), with(func(e *persistence.Event) { e.Data = json.RawMessage(`{"a":`) }), `"data"`},
		{"bad surfaceOp", testHeader("x"), with(func(e *persistence.Event) { e.SurfaceOp = json.RawMessage(`append`) }), `"surfaceOp"`},
	}
	ctx := context.Background()
	s := newStore(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Append(ctx, tt.header, tt.event)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Append(%s) = %v, want an error naming field %s", tt.name, err, tt.field)
			}
		})
	}
	if infos, err := s.List(ctx); err != nil || len(infos) != 0 {
		t.Errorf("List() after refused appends = %v, %v, want no sessions", infos, err)
	}
}

func TestAppendHeaderConflict(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	h := testHeader("same-id")
	if err := s.Append(ctx, h, makeEvents(0, 2)...); err != nil {
		t.Fatalf("Append() = %v", err)
	}
	other := h
	other.Cwd = "/srv/elsewhere"
	if err := s.Append(ctx, other, makeEvents(2, 1)...); !errors.Is(err, sqlite.ErrHeaderConflict) {
		t.Errorf("Append(same id, other cwd) = %v, want ErrHeaderConflict", err)
	}
	if err := s.Append(ctx, session.Resume(h), makeEvents(2, 1)...); err != nil {
		t.Errorf("Append(resumed header) = %v, want nil", err)
	}
}

func TestAppendCanceledContext(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := testHeader("canceled")
	if err := s.Append(ctx, h, makeEvents(0, 2)...); !errors.Is(err, context.Canceled) {
		t.Errorf("Append(canceled context) = %v, want context.Canceled", err)
	}
	if _, err := s.Load(context.Background(), h.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("Load(%q) after a canceled append = %v, want ErrNotFound", h.ID, err)
	}
}

func TestConcurrentSessions(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const (
		sessions = 8
		batches  = 20
		perBatch = 5
	)
	var wg sync.WaitGroup
	errs := make(chan error, sessions*batches*2)
	for i := range sessions {
		wg.Go(func() {
			h := testHeader(fmt.Sprintf("concurrent-%d", i))
			for b := range batches {
				if err := s.Append(ctx, h, makeEvents(int64(b*perBatch), perBatch)...); err != nil {
					errs <- fmt.Errorf("session %d batch %d: Append() = %w", i, b, err)
					return
				}
				log, err := s.Load(ctx, h.ID)
				if err != nil {
					errs <- fmt.Errorf("session %d batch %d: Load() = %w", i, b, err)
					return
				}
				if got, want := len(log.Events), (b+1)*perBatch; got != want {
					errs <- fmt.Errorf("session %d batch %d: Load() returned %d events, want %d", i, b, got, want)
				}
				if _, err := s.List(ctx); err != nil {
					errs <- fmt.Errorf("session %d batch %d: List() = %w", i, b, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range sessions {
		id := fmt.Sprintf("concurrent-%d", i)
		log, err := s.Load(ctx, id)
		if err != nil {
			t.Fatalf("Load(%q) = %v", id, err)
		}
		if d := diffEvents(log.Events, makeEvents(0, batches*perBatch)); d != "" {
			t.Errorf("Load(%q).Events: %s", id, d)
		}
	}
}

func TestConcurrentAppendSameSeq(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	h := testHeader("contested")
	const writers = 6
	results := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() { results <- s.Append(ctx, h, makeEvents(0, 3)...) })
	}
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, persistence.ErrSeqGap):
			t.Errorf("Append(contested seq 0) = %v, want nil or ErrSeqGap", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d racing Append(seq 0..2) succeeded, want exactly 1", ok, writers)
	}
	log, err := s.Load(ctx, h.ID)
	if err != nil {
		t.Fatalf("Load(%q) = %v", h.ID, err)
	}
	if d := diffEvents(log.Events, makeEvents(0, 3)); d != "" {
		t.Errorf("Load(%q).Events: %s", h.ID, d)
	}
}

func TestReopenAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sessions.sqlite")
	ctx := context.Background()
	h := testHeader("reopen")
	s := openStore(t, path)
	if err := s.Append(ctx, h, makeEvents(0, 4)...); err != nil {
		t.Fatalf("Append() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if err := s.Append(ctx, h, makeEvents(4, 1)...); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("Append() after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Load(ctx, h.ID); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("Load() after Close = %v, want ErrClosed", err)
	}
	if _, err := s.List(ctx); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("List() after Close = %v, want ErrClosed", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("Flush() after Close = %v, want ErrClosed", err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("os.Stat(-wal) after Close = %v, want not exist (checkpointed)", err)
	}

	s = openStore(t, path)
	log, err := s.Load(ctx, h.ID)
	if err != nil {
		t.Fatalf("Load(%q) after reopen = %v", h.ID, err)
	}
	if d := diffEvents(log.Events, makeEvents(0, 4)); d != "" {
		t.Errorf("Load(%q).Events after reopen: %s", h.ID, d)
	}
	if err := s.Append(ctx, h, makeEvents(3, 1)...); !errors.Is(err, persistence.ErrSeqGap) {
		t.Errorf("Append(seq 3) after reopen = %v, want ErrSeqGap", err)
	}
	if err := s.Append(ctx, h, makeEvents(4, 2)...); err != nil {
		t.Fatalf("Append(seq 4..5) after reopen = %v", err)
	}
	log, err = s.Load(ctx, h.ID)
	if err != nil {
		t.Fatalf("Load(%q) = %v", h.ID, err)
	}
	if d := diffEvents(log.Events, makeEvents(0, 6)); d != "" {
		t.Errorf("Load(%q).Events: %s", h.ID, d)
	}
}

func TestLoadNotFound(t *testing.T) {
	s := newStore(t)
	_, err := s.Load(context.Background(), "missing-id")
	if !errors.Is(err, persistence.ErrNotFound) || !strings.Contains(err.Error(), "missing-id") {
		t.Errorf("Load(%q) = %v, want ErrNotFound naming the id", "missing-id", err)
	}
}

// TestEmptyStringsKept: a header with "parentSession": "" and
// "agentPreset": "" loads back with both (stored as "", as dsh stores
// them), and one without them loads back without.
func TestEmptyStringsKept(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	kept := testHeader("empty-kept")
	kept.EmptyParentSession, kept.EmptyAgentPreset = true, true
	absent := testHeader("absent")
	for _, h := range []session.Header{kept, absent} {
		if err := s.Append(ctx, h, makeEvents(0, 1)...); err != nil {
			t.Fatal(err)
		}
		log, err := s.Load(ctx, h.ID)
		if err != nil || !reflect.DeepEqual(log.Header, h) {
			t.Errorf("Load(%q).Header = %+v, %v; want %+v", h.ID, log.Header, err, h)
		}
	}
}
