package jsonl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// newStore returns a Store under a fresh root that does not exist yet.
// BatchDelay is an hour unless set, so only Flush writes.
func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.Root == "" {
		opts.Root = filepath.Join(t.TempDir(), "sessions")
	}
	if opts.BatchDelay == 0 {
		opts.BatchDelay = time.Hour
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testSession(id string) session.Header {
	return session.Header{ID: id, CreatedAt: 1700000000000, Cwd: "/srv/app"}
}

// mkEvents returns n events starting at seq from, mixing plain events and
// runs of text and tool-call deltas so packed mode packs some of them.
func mkEvents(from, n int) []persistence.Event {
	out := make([]persistence.Event, 0, n)
	for i := from; i < from+n; i++ {
		var data string
		typ := "assistant/chunk"
		switch i % 10 {
		case 0, 1:
			typ = "user/message"
			data = fmt.Sprintf(`{"text":"hello <%d> & \"bye\"","n":%d}`, i, i)
		case 2, 3, 4, 5:
			data = fmt.Sprintf(`{"turn":1,"step":%d,"chunk":{"type":"text-delta","index":0,"text":"t%d"}}`, i/10, i)
		default:
			data = fmt.Sprintf(`{"turn":1,"step":%d,"chunk":{"type":"tool-call-delta","index":1,"id":"call_%d","name":"bash","argumentsDelta":"{%d"}}`, i/10, i/10, i)
		}
		out = append(out, persistence.Event{Type: typ, Seq: int64(i), Time: 1700000000000 + int64(i)*3, Data: json.RawMessage(data)})
	}
	return out
}

func mustAppend(t *testing.T, s *Store, h session.Header, events ...persistence.Event) {
	t.Helper()
	if err := s.Append(context.Background(), h, events...); err != nil {
		t.Fatalf("Append(seq %d..) = %v", events[0].Seq, err)
	}
}

func mustFlush(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("Flush() = %v", err)
	}
}

func TestNewOptionsErrors(t *testing.T) {
	abs := t.TempDir()
	tests := []struct {
		name string
		opts Options
		hint string
	}{
		{"no root", Options{}, "Root is required"},
		{"relative root", Options{Root: "sessions"}, `"sessions"`},
		{"bad compression", Options{Root: abs, Compression: "gzip"}, `"gzip"`},
		{"negative delay", Options{Root: abs, BatchDelay: -time.Second}, "BatchDelay"},
	}
	for _, tt := range tests {
		if _, err := New(tt.opts); err == nil || !strings.Contains(err.Error(), tt.hint) {
			t.Errorf("%s: New(%+v) = %v, want an error containing %q", tt.name, tt.opts, err, tt.hint)
		}
	}
}

func TestLocateIsPure(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd} {
		s := newStore(t, Options{Compression: c})
		h := testSession("session-a")
		loc, ok := s.Locate(h)
		if want := Path(s.root, h, c); !ok || loc.Kind != persistence.KindJSONL || loc.Path != want {
			t.Errorf("Locate(%+v) = %+v, %v; want {jsonl %s}, true", h, loc, ok, want)
		}
		if !filepath.IsAbs(loc.Path) {
			t.Errorf("Locate path %q is not absolute", loc.Path)
		}
		if _, err := os.Stat(s.root); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Locate created the root: Stat = %v", err)
		}
		if loc, ok := s.Locate(session.Header{}); ok {
			t.Errorf("Locate(empty id) = %+v, true; want not ok", loc)
		}
	}
}

func TestLazyCreationAndPermissions(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd} {
		t.Run(string(c), func(t *testing.T) {
			s := newStore(t, Options{Compression: c})
			h := testSession("session-lazy")
			ctx := context.Background()
			// Nothing on disk for a store that only locates, appends
			// nothing, or has events queued but not yet written.
			s.Locate(h)
			if err := s.Append(ctx, h); err != nil {
				t.Fatal(err)
			}
			mustFlush(t, s)
			if _, err := os.Stat(s.root); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("root exists before any event: Stat = %v", err)
			}
			mustAppend(t, s, h, mkEvents(0, 3)...)
			if _, err := os.Stat(s.root); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("root exists before the batch is written: Stat = %v", err)
			}
			if infos, err := s.List(ctx); err != nil || len(infos) != 1 {
				t.Fatalf("List() = %v, %v; want the one session (List writes queued batches)", infos, err)
			}
			loc, _ := s.Locate(h)
			checkMode(t, loc.Path, 0o600)
			checkMode(t, filepath.Dir(loc.Path), 0o700|fs.ModeDir)
			checkMode(t, filepath.Dir(filepath.Dir(loc.Path)), 0o700|fs.ModeDir)
			checkMode(t, s.root, 0o700|fs.ModeDir)
			entries, err := os.ReadDir(filepath.Dir(loc.Path))
			if err != nil || len(entries) != 1 || entries[0].Name() != filepath.Base(loc.Path) {
				t.Fatalf("session dir holds %v (%v), want only %s (no temp files)", entries, err, filepath.Base(loc.Path))
			}
		})
	}
}

func checkMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModePerm | fs.ModeDir); got != want {
		t.Errorf("mode of %s = %v, want %v", path, got, want)
	}
}

func TestBatchTimerWrites(t *testing.T) {
	s := newStore(t, Options{BatchDelay: time.Millisecond})
	h := testSession("session-timer")
	mustAppend(t, s, h, mkEvents(0, 5)...)
	loc, _ := s.Locate(h)
	// Wait for the write-behind timer; the deadline only bounds a hang.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if log, err := ReadFile(loc.Path); err == nil && len(log.Events) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch timer never wrote the batch")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFlushDurability(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd} {
		t.Run(string(c), func(t *testing.T) {
			s := newStore(t, Options{Compression: c, Packed: true})
			h := testSession("session-durable")
			want := mkEvents(0, 40)
			mustAppend(t, s, h, want[:15]...)
			mustFlush(t, s)
			mustAppend(t, s, h, want[15:]...)
			mustFlush(t, s)
			// A second store (a fresh process) and the plain reader both see
			// every flushed event.
			other, err := New(Options{Root: s.root, Compression: c})
			if err != nil {
				t.Fatal(err)
			}
			got, err := other.Load(context.Background(), h.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, got.Events, want)
			loc, _ := s.Locate(h)
			log, err := ReadFile(loc.Path)
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, log.Events, want)
		})
	}
}

func TestAppendSeqGap(t *testing.T) {
	s := newStore(t, Options{})
	h := testSession("session-gap")
	ctx := context.Background()
	tests := []struct {
		name   string
		events []persistence.Event
		ok     bool
	}{
		{"first event not seq 0", mkEvents(1, 2), false},
		{"gap inside the batch", append(mkEvents(0, 2), mkEvents(3, 1)...), false},
		{"contiguous", mkEvents(0, 3), true},
		{"repeats seq 2", mkEvents(2, 1), false},
		{"skips seq 3", mkEvents(4, 1), false},
		{"continues", mkEvents(3, 2), true},
	}
	for _, tt := range tests {
		err := s.Append(ctx, h, tt.events...)
		if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, persistence.ErrSeqGap) {
			t.Errorf("%s: Append() = %v, want ok %v or ErrSeqGap", tt.name, err, tt.ok)
		}
	}
	log, err := s.Load(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, log.Events, mkEvents(0, 5))
}

func TestLoadSeqGap(t *testing.T) {
	s := newStore(t, Options{})
	h := testSession("session-load-gap")
	mustAppend(t, s, h, mkEvents(0, 3)...)
	mustFlush(t, s)
	loc, _ := s.Locate(h)
	// Drop the line of seq 1.
	data, _ := os.ReadFile(loc.Path)
	lines := bytes.SplitAfter(data, []byte("\n"))
	bad := bytes.Join(append(lines[:2:2], lines[3:]...), nil)
	if err := os.WriteFile(loc.Path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	other := newStore(t, Options{Root: s.root})
	log, err := other.Load(context.Background(), h.ID)
	if err != nil {
		t.Fatalf("Load(gapped log) = %v, want the log with its gap reported", err)
	}
	if want := []persistence.SeqGap{{Line: 3, Want: 1, Got: 2}}; !reflect.DeepEqual(log.Gaps, want) {
		t.Errorf("Load(gapped log).Gaps = %+v, want %+v", log.Gaps, want)
	}
	if len(log.Events) != 2 || log.Events[0].Seq != 0 || log.Events[1].Seq != 2 {
		t.Errorf("Load(gapped log) events = %+v, want seq 0 and 2", log.Events)
	}
	// Appending to it is refused as well.
	if err := other.Append(context.Background(), h, mkEvents(3, 1)...); !errors.Is(err, persistence.ErrSeqGap) {
		t.Fatalf("Append(to gapped log) = %v, want ErrSeqGap", err)
	}
}

func TestAppendEventValidation(t *testing.T) {
	s := newStore(t, Options{})
	h := testSession("session-valid")
	tests := []struct {
		name string
		e    persistence.Event
		hint string
	}{
		{"empty type", persistence.Event{Data: []byte(`1`)}, "type must be non-empty"},
		{"reserved type", persistence.Event{Type: "text-chunks", Data: []byte(`1`)}, "storage row tag"},
		{"header type", persistence.Event{Type: "session", Data: []byte(`1`)}, "storage row tag"},
		{"no data", persistence.Event{Type: "x"}, "data is required"},
		{"invalid data", persistence.Event{Type: "x", Data: []byte(`{"a":`)}, "data is not"},
		{"data injecting fields", persistence.Event{Type: "x", Data: []byte(`1,"seq":9`)}, "data is not"},
		{"invalid surfaceOp", persistence.Event{Type: "x", Data: []byte(`1`), SurfaceOp: []byte(`}`)}, "surfaceOp is not"},
		{"non-UTF-8 type", persistence.Event{Type: "x\xff", Data: []byte(`1`)}, "not valid UTF-8"},
	}
	for _, tt := range tests {
		err := s.Append(context.Background(), h, tt.e)
		if err == nil || !strings.Contains(err.Error(), tt.hint) {
			t.Errorf("%s: Append(%+v) = %v, want an error containing %q", tt.name, tt.e, err, tt.hint)
		}
	}
	// Nothing was queued: seq 0 is still next.
	mustAppend(t, s, h, persistence.Event{Type: "x", Seq: 0, Data: []byte("null")})
}

func TestAppendWritesCompactUnescapedJSON(t *testing.T) {
	s := newStore(t, Options{})
	h := session.Header{ID: "id<&>", CreatedAt: 1}
	data := []byte("{\n  \"html\": \"<a href='x'>&amp;</a>\",\n  \"n\": [1, 2]\n}")
	surface := []byte(` "append" `)
	mustAppend(t, s, h,
		persistence.Event{Type: "user/message", Seq: 0, Time: 5, Data: data, Ignorable: true, SourceEventSeqs: []int64{0}, SurfaceOp: surface})
	data[3] = 'X' // the caller's buffer may change after Append returns
	mustFlush(t, s)
	loc, _ := s.Locate(h)
	got, err := os.ReadFile(loc.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"session","version":0,"id":"id<&>","createdAt":1,"delegationDepth":0}` + "\n" +
		`{"type":"user/message","seq":0,"time":5,"data":{"html":"<a href='x'>&amp;</a>","n":[1,2]},"ignorable":true,"sourceEventSeqs":[0],"surfaceOp":"append"}` + "\n"
	if string(got) != want {
		t.Fatalf("file =\n%s\nwant\n%s", got, want)
	}
}

func TestPackedRows(t *testing.T) {
	s := newStore(t, Options{Packed: true})
	h := testSession("session-packed")
	text := func(seq, tm int64, step int, txt string) persistence.Event {
		return persistence.Event{Type: "assistant/chunk", Seq: seq, Time: tm,
			Data: []byte(fmt.Sprintf(`{"turn":1,"step":%d,"chunk":{"type":"text-delta","index":0,"text":%q}}`, step, txt))}
	}
	events := []persistence.Event{
		text(0, 100, 1, "a"), text(1, 100, 1, "b"), text(2, 107, 1, "c"), // run of 3: packed
		text(3, 110, 2, "d"), text(4, 111, 2, "e"), // other step, run of 2: plain
		{Type: "assistant/chunk", Seq: 5, Time: 120, Data: []byte(`{"turn":1,"step":3,"chunk":{"type":"tool-call-delta","index":1,"id":"c1","argumentsDelta":"{"}}`)},
		{Type: "assistant/chunk", Seq: 6, Time: 121, Data: []byte(`{"turn":1,"step":3,"chunk":{"type":"tool-call-delta","index":1,"id":"c1","argumentsDelta":"}"}}`)},
		{Type: "assistant/chunk", Seq: 7, Time: 119, Data: []byte(`{"turn":1,"step":3,"chunk":{"type":"tool-call-delta","index":1,"id":"c1","argumentsDelta":""}}`)},
		// An extra key makes a delta unpackable; it is written as is.
		{Type: "assistant/chunk", Seq: 8, Time: 130, Data: []byte(`{"turn":1,"step":3,"chunk":{"type":"text-delta","index":0,"text":"x","extra":1}}`)},
		text(9, 131, 3, "y"), text(10, 132, 3, "z"), text(11, 133, 3, "w"),
	}
	mustAppend(t, s, h, events...)
	mustFlush(t, s)
	loc, _ := s.Locate(h)
	raw, _ := os.ReadFile(loc.Path)
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	want := []string{
		`{"type":"text-chunks","seq0":0,"time0":100,"data":{"turn":1,"step":1,"index":0,"dt":[0,7],"texts":["a","b","c"]}}`,
		string(appendEventLine(nil, &events[3])[:len(appendEventLine(nil, &events[3]))-1]),
		string(appendEventLine(nil, &events[4])[:len(appendEventLine(nil, &events[4]))-1]),
		`{"type":"tool-call-chunks","seq0":5,"time0":120,"data":{"turn":1,"step":3,"index":1,"dt":[1,-2],"id":"c1","args":["{","}",""]}}`,
		string(appendEventLine(nil, &events[8])[:len(appendEventLine(nil, &events[8]))-1]),
		`{"type":"text-chunks","seq0":9,"time0":131,"data":{"turn":1,"step":3,"index":0,"dt":[1,1],"texts":["y","z","w"]}}`,
	}
	if len(lines) != len(want)+1 {
		t.Fatalf("file has %d lines, want %d:\n%s", len(lines), len(want)+1, raw)
	}
	for i, w := range want {
		if lines[i+1] != w {
			t.Errorf("line %d = %s, want %s", i+2, lines[i+1], w)
		}
	}
	log, err := s.Load(context.Background(), h.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, log.Events, events)
}

// TestTruncatedLastRecord truncates a flushed log at every byte offset
// inside its last record: each copy loads the complete prefix, and a new
// store continues the copy after dropping the torn tail.
func TestTruncatedLastRecord(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd} {
		t.Run(string(c), func(t *testing.T) {
			s := newStore(t, Options{Compression: c, Packed: true})
			h := testSession("session-torn")
			all := mkEvents(0, 30)
			mustAppend(t, s, h, all[:27]...)
			mustFlush(t, s)
			mustAppend(t, s, h, all[27:]...) // the last record: 3 events
			mustFlush(t, s)
			loc, _ := s.Locate(h)
			data, err := os.ReadFile(loc.Path)
			if err != nil {
				t.Fatal(err)
			}
			// In a plain file the last record is the last line; in a zstd
			// file the last frame, which holds the whole last batch.
			// The last batch (seq 27..29) is a run of tool-call deltas: one
			// packed row in a plain file, one frame in a zstd file.
			start := bytes.LastIndexByte(data[:len(data)-1], '\n') + 1
			if c == CompressionZstd {
				start = zstdFramesLen(t, data, 2)
			}
			prefix := all[:27]
			dir := t.TempDir()
			for off := start; off < len(data); off++ {
				p := filepath.Join(dir, fmt.Sprintf("cut-%d-%s", off, filepath.Base(loc.Path)))
				if err := os.WriteFile(p, data[:off], 0o600); err != nil {
					t.Fatal(err)
				}
				log, err := ReadFile(p)
				if err != nil {
					t.Fatalf("ReadFile(cut at %d of %d) = %v", off, len(data), err)
				}
				sameEvents(t, log.Events, prefix)
				_ = os.Remove(p)
			}
			// Resume a log torn in the middle of its last record.
			cut := start + (len(data)-start)/2
			if err := os.WriteFile(loc.Path, data[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			resumed := newStore(t, Options{Root: s.root, Compression: c})
			ctx := context.Background()
			if err := resumed.Append(ctx, h, all[len(all)-1]); !errors.Is(err, persistence.ErrSeqGap) {
				t.Fatalf("Append(seq %d, which was torn away) = %v, want ErrSeqGap", len(all)-1, err)
			}
			more := mkEvents(len(prefix), 5)
			mustAppend(t, resumed, h, more...)
			mustFlush(t, resumed)
			log, err := resumed.Load(ctx, h.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, log.Events, append(append([]persistence.Event(nil), prefix...), more...))
		})
	}
}

// zstdFramesLen returns the length of the first n frames of data.
func zstdFramesLen(t *testing.T, data []byte, n int) int {
	t.Helper()
	fr := frameReader{r: bufioReader(data)}
	for range n {
		if _, err := fr.next(); err != nil {
			t.Fatal(err)
		}
	}
	return int(fr.offset)
}

func TestResumeRefusesOtherHeader(t *testing.T) {
	s := newStore(t, Options{})
	h := testSession("session-hdr")
	mustAppend(t, s, h, mkEvents(0, 1)...)
	changed := h
	changed.CreatedAt++
	if err := s.Append(context.Background(), changed, mkEvents(1, 1)...); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("Append(changed header) = %v, want a header mismatch error", err)
	}
	mustFlush(t, s)
	other := newStore(t, Options{Root: s.root})
	if err := other.Append(context.Background(), changed, mkEvents(1, 1)...); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("Append(changed header, fresh store) = %v, want a header mismatch error", err)
	}
	if err := other.Append(context.Background(), h, mkEvents(1, 1)...); err != nil {
		t.Fatalf("Append(same header, fresh store) = %v", err)
	}
}

func TestCompressionMismatch(t *testing.T) {
	plain := newStore(t, Options{})
	h := testSession("session-mixed")
	mustAppend(t, plain, h, mkEvents(0, 1)...)
	mustFlush(t, plain)
	z := newStore(t, Options{Root: plain.root, Compression: CompressionZstd})
	if err := z.Append(context.Background(), h, mkEvents(1, 1)...); err == nil || !strings.Contains(err.Error(), "stored as") {
		t.Fatalf("Append(zstd store over a plain log) = %v, want an error naming the stored file", err)
	}
}

func TestLoadErrors(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	if _, err := s.Load(ctx, "nobody"); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("Load(no root) = %v, want ErrNotFound", err)
	}
	h := testSession("session-load")
	mustAppend(t, s, h, mkEvents(0, 2)...)
	mustFlush(t, s)
	if _, err := s.Load(ctx, "nobody"); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("Load(unknown id) = %v, want ErrNotFound", err)
	}
	if _, err := s.Load(ctx, ""); err == nil {
		t.Error("Load(empty id) = nil error")
	}
	// A copy under another project directory is ambiguous.
	loc, _ := s.Locate(h)
	twin := filepath.Join(s.root, "--elsewhere--", filepath.Base(filepath.Dir(loc.Path)), "session.jsonl")
	if err := os.MkdirAll(filepath.Dir(twin), 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(loc.Path)
	if err := os.WriteFile(twin, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, h.ID); err == nil || !strings.Contains(err.Error(), "2 transcripts") {
		t.Errorf("Load(two copies) = %v, want an ambiguity error", err)
	}
	if _, err := s.List(ctx); err == nil {
		t.Error("List() with a misplaced transcript = nil error")
	}
	// Alone, the misplaced copy is refused: its header puts it elsewhere.
	if err := os.Remove(loc.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, h.ID); err == nil || !strings.Contains(err.Error(), "belongs at") {
		t.Errorf("Load(misplaced) = %v, want a location error", err)
	}
}

func TestList(t *testing.T) {
	s := newStore(t, Options{Compression: CompressionZstd})
	ctx := context.Background()
	if infos, err := s.List(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("List(empty) = %v, %v", infos, err)
	}
	a := session.Header{ID: "b-second", CreatedAt: 2, Cwd: "/srv/app"}
	b := session.Header{ID: "a-first", CreatedAt: 1}
	child := session.Spawn(a, "", time.UnixMilli(3))
	never := session.Header{ID: "never-appended", CreatedAt: 0, Cwd: "/srv/app"}
	for _, h := range []session.Header{a, b, child} {
		mustAppend(t, s, h, mkEvents(0, 2)...)
	}
	s.Locate(never)
	infos, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []session.Header{b, a, child}
	if len(infos) != len(want) {
		t.Fatalf("List() = %d sessions, want %d", len(infos), len(want))
	}
	for i, h := range want {
		loc, _ := s.Locate(h)
		if !reflect.DeepEqual(infos[i].Header, h) || infos[i].Location != loc {
			t.Errorf("List()[%d] = %+v, want header %+v at %+v", i, infos[i], h, loc)
		}
	}
}

func TestParallelSessions(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd} {
		t.Run(string(c), func(t *testing.T) {
			s := newStore(t, Options{Compression: c, Packed: true, BatchDelay: time.Millisecond})
			ctx := context.Background()
			const sessions, perSession = 12, 150
			var wg sync.WaitGroup
			errs := make(chan error, sessions+1)
			stop := make(chan struct{})
			go func() { // concurrent Flush, List and Load calls
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := s.Flush(ctx); err != nil {
						errs <- err
						return
					}
					if _, err := s.List(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
			for i := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := session.Header{ID: fmt.Sprintf("session-%02d", i), CreatedAt: int64(i), Cwd: fmt.Sprintf("/srv/p%d", i%3)}
					events := mkEvents(0, perSession)
					for j := 0; j < perSession; {
						n := min(1+(i+j)%9, perSession-j)
						if err := s.Append(ctx, h, events[j:j+n]...); err != nil {
							errs <- err
							return
						}
						j += n
					}
				}()
			}
			wg.Wait()
			close(stop)
			mustFlush(t, s)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for i := range sessions {
				log, err := s.Load(ctx, fmt.Sprintf("session-%02d", i))
				if err != nil {
					t.Fatal(err)
				}
				sameEvents(t, log.Events, mkEvents(0, perSession))
			}
		})
	}
}

func TestCloseFlushesAndRefuses(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sessions")
	s, err := New(Options{Root: root, BatchDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := testSession("session-close")
	mustAppend(t, s, h, mkEvents(0, 4)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	ctx := context.Background()
	if err := s.Append(ctx, h, mkEvents(4, 1)...); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
	loc, _ := s.Locate(h)
	log, err := ReadFile(loc.Path)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, log.Events, mkEvents(0, 4))
}

func TestAppendHonoursContext(t *testing.T) {
	s := newStore(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Append(ctx, testSession("session-ctx"), mkEvents(0, 1)...); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append(cancelled) = %v, want context.Canceled", err)
	}
}

func TestAppendRefusesSecondTranscript(t *testing.T) {
	s := newStore(t, Options{})
	h := testSession("session-moved")
	mustAppend(t, s, h, mkEvents(0, 1)...)
	mustFlush(t, s)
	moved := h
	moved.Cwd = "/elsewhere"
	other := newStore(t, Options{Root: s.root})
	err := other.Append(context.Background(), moved, mkEvents(1, 1)...)
	if err == nil || !strings.Contains(err.Error(), "already has a transcript") {
		t.Fatalf("Append(same id, other cwd) = %v, want an error naming the existing transcript", err)
	}
}

// TestFailedWriteStaysQueued makes a batch write fail (the transcript is
// briefly replaced by a directory, which even root cannot open for
// writing): Flush reports it, nothing is lost, and the next Flush writes
// the batch once the file is back.
func TestFailedWriteStaysQueued(t *testing.T) {
	s := newStore(t, Options{})
	h := testSession("session-retry")
	mustAppend(t, s, h, mkEvents(0, 3)...)
	mustFlush(t, s)
	mustAppend(t, s, h, mkEvents(3, 2)...)
	loc, _ := s.Locate(h)
	aside := loc.Path + ".aside"
	if err := os.Rename(loc.Path, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(loc.Path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err == nil || !strings.Contains(err.Error(), "session-retry") {
		t.Fatalf("Flush() with the file replaced = %v, want an error naming the session", err)
	}
	mustAppend(t, s, h, mkEvents(5, 1)...) // still continues from seq 5
	if err := os.Remove(loc.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, loc.Path); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, s)
	log, err := ReadFile(loc.Path)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, log.Events, mkEvents(0, 6))
}

// TestZstdFrameLayout checks the zstd file shape: the first frame holds
// exactly the header line, each written batch adds one frame, and the
// file as a whole is an ordinary zstd stream of the plain JSONL.
func TestZstdFrameLayout(t *testing.T) {
	s := newStore(t, Options{Compression: CompressionZstd})
	h := testSession("session-frames")
	for i := range 3 {
		mustAppend(t, s, h, mkEvents(i*4, 4)...)
		mustFlush(t, s)
	}
	loc, _ := s.Locate(h)
	if !strings.HasSuffix(loc.Path, "session.jsonl.zstd") {
		t.Fatalf("Locate path %s, want session.jsonl.zstd", loc.Path)
	}
	data, err := os.ReadFile(loc.Path)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := zstdDecoder()
	if err != nil {
		t.Fatal(err)
	}
	fr := frameReader{r: bufioReader(data)}
	var frames []string
	for {
		f, err := fr.next()
		if err != nil {
			break
		}
		content, err := dec.DecodeAll(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, string(content))
	}
	headerLine, _ := h.MarshalJSON()
	if len(frames) != 4 || frames[0] != string(headerLine)+"\n" {
		t.Fatalf("frames = %d, first %q; want 4 frames, the first exactly the header line", len(frames), frames[0])
	}
	plain := string(appendBatch(append(headerLine, '\n'), mkEvents(0, 12), false))
	whole, err := dec.DecodeAll(data, nil)
	if err != nil || string(whole) != plain {
		t.Fatalf("decoding the whole file = %v, %q; want the plain log", err, whole)
	}
}
