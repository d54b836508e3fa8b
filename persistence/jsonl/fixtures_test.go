package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// loadFixture reads the fixture log name.
func loadFixture(t *testing.T, dir, name string) ([]byte, *persistence.Log, error) {
	t.Helper()
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log, err := ReadFile(path)
	return data, log, err
}

func TestFixturesLoad(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no fixtures in %s (%v)", dir, err)
	}
	for _, p := range names {
		name := filepath.Base(p)
		t.Run(name, func(t *testing.T) {
			data, log, err := loadFixture(t, dir, name)
			if err != nil {
				t.Fatalf("ReadFile(%s) = %v, want nil", name, err)
			}
			if len(log.Gaps) != 0 {
				t.Fatalf("ReadFile(%s).Gaps = %+v, want none", name, log.Gaps)
			}
			checkFixture(t, data, log)
		})
	}
}

// TestFixturesZstdLoad reads every zstd log dsh wrote: it loads without
// gaps, seq is contiguous, the header round-trips, and it holds the same
// events, type by type, as its plain twin (the same conversation written
// by dsh without compression).
func TestFixturesZstdLoad(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl.zstd"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no zstd fixtures in %s (%v)", dir, err)
	}
	for _, p := range names {
		t.Run(filepath.Base(p), func(t *testing.T) {
			log, err := ReadFile(p)
			if err != nil || len(log.Gaps) != 0 {
				t.Fatalf("ReadFile(%s) = %v, gaps %+v; want no error and no gaps", p, err, log.Gaps)
			}
			twin, err := ReadFile(strings.TrimSuffix(p, ".zstd"))
			if err != nil {
				t.Fatal(err)
			}
			if len(log.Events) == 0 || len(log.Events) != len(twin.Events) {
				t.Fatalf("%d events, the plain twin has %d", len(log.Events), len(twin.Events))
			}
			for i, e := range log.Events {
				if e.Seq != int64(i) || e.Type != twin.Events[i].Type {
					t.Fatalf("event %d: seq %d type %q, want seq %d type %q", i, e.Seq, e.Type, i, twin.Events[i].Type)
				}
			}
			out, err := log.Header.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := session.Parse(out); err != nil || !reflect.DeepEqual(back, log.Header) {
				t.Fatalf("session.Parse(%s) = %+v, %v; want %+v", out, back, err, log.Header)
			}
		})
	}
}

// TestFixtureGapReported drops one event line from a real log: the
// reader reports the gap at that line, and no other.
func TestFixtureGapReported(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtures.DSHSessions(t), "turns.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	drop := len(lines) / 2
	for bytes.Contains(lines[drop], []byte(`"seq0"`)) {
		drop++ // a plain event line, not a packed row
	}
	gapped := bytes.Join(append(append([][]byte{}, lines[:drop]...), lines[drop+1:]...), nil)
	path := filepath.Join(t.TempDir(), "session.jsonl")
	if err := os.WriteFile(path, gapped, 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile(a log with a gap) = %v, want the gap reported", err)
	}
	if len(log.Gaps) != 1 || log.Gaps[0].Line != int64(drop+1) {
		t.Fatalf("ReadFile().Gaps = %+v, want one gap at line %d", log.Gaps, drop+1)
	}
	checkGaps(t, log)
}

// checkGaps checks that seq only rises and that every jump is a reported
// gap, and no other.
func checkGaps(t *testing.T, log *persistence.Log) {
	t.Helper()
	want, g := int64(0), 0
	for _, e := range log.Events {
		if e.Seq != want {
			if g >= len(log.Gaps) || log.Gaps[g].Want != want || log.Gaps[g].Got != e.Seq {
				t.Fatalf("seq jumps from %d to %d, not as reported in %+v", want, e.Seq, log.Gaps)
			}
			g++
		}
		want = e.Seq + 1
	}
	if g != len(log.Gaps) {
		t.Fatalf("%d gaps reported, %d seen", len(log.Gaps), g)
	}
}

// checkFixture compares a loaded log with an independent, generic decoding
// of the same bytes.
func checkFixture(t *testing.T, data []byte, log *persistence.Log) {
	t.Helper()
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))

	// The header round-trips: same keys and values, plus delegationDepth 0
	// when the file predates it.
	want := decodeMap(t, lines[0])
	if _, ok := want["delegationDepth"]; !ok {
		want["delegationDepth"] = json.Number("0")
	}
	out, err := log.Header.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON() = %v", err)
	}
	if got := decodeMap(t, out); !reflect.DeepEqual(got, want) {
		t.Fatalf("header round trip:\n got %v\nwant %v", got, want)
	}
	reparsed, err := session.Parse(out)
	if err != nil || !reflect.DeepEqual(reparsed, log.Header) {
		t.Fatalf("session.Parse(%s) = %+v, %v; want %+v", out, reparsed, err, log.Header)
	}

	// Seq is contiguous from 0.
	for i, e := range log.Events {
		if e.Seq != int64(i) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}

	// Every line maps to its events: plain events verbatim (whatever their
	// type), packed rows expanded member by member.
	next := int64(0)
	packedRows := 0
	for n, line := range lines[1:] {
		var env map[string]json.RawMessage
		if err := json.Unmarshal(line, &env); err != nil {
			t.Fatalf("line %d: %v", n+2, err)
		}
		var typ string
		_ = json.Unmarshal(env["type"], &typ)
		if strings.HasSuffix(typ, "-chunks") {
			packedRows++
			next = checkPackedRow(t, n+2, typ, env, log.Events, next)
			continue
		}
		if next >= int64(len(log.Events)) {
			t.Fatalf("line %d: no event loaded for it", n+2)
		}
		e := log.Events[next]
		if e.Type != typ || string(e.Data) != string(env["data"]) || string(e.SurfaceOp) != string(env["surfaceOp"]) {
			t.Fatalf("line %d: loaded %q data %s surfaceOp %s, want %q data %s surfaceOp %s",
				n+2, e.Type, e.Data, e.SurfaceOp, typ, env["data"], env["surfaceOp"])
		}
		var seqs []int64
		if raw, ok := env["sourceEventSeqs"]; ok {
			_ = json.Unmarshal(raw, &seqs)
		}
		if len(seqs) == 0 {
			seqs = nil
		}
		if !reflect.DeepEqual(e.SourceEventSeqs, seqs) {
			t.Fatalf("line %d: sourceEventSeqs %v, want %v", n+2, e.SourceEventSeqs, seqs)
		}
		next++
	}
	if next != int64(len(log.Events)) {
		t.Fatalf("lines describe %d events, loaded %d", next, len(log.Events))
	}
	t.Logf("%d events, %d packed rows", len(log.Events), packedRows)
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}

// checkPackedRow checks the events a packed row expanded to and returns
// the seq after them.
func checkPackedRow(t *testing.T, line int, typ string, env map[string]json.RawMessage, events []persistence.Event, next int64) int64 {
	t.Helper()
	var seq0, time0 int64
	_ = json.Unmarshal(env["seq0"], &seq0)
	_ = json.Unmarshal(env["time0"], &time0)
	if seq0 != next {
		t.Fatalf("line %d: seq0 %d, want %d", line, seq0, next)
	}
	d := decodeMap(t, env["data"])
	dt := d["dt"].([]any)
	members, _ := d["texts"].([]any)
	chunkType := map[string]string{"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta"}[typ]
	if typ == "tool-call-chunks" {
		members = d["args"].([]any)
		chunkType = "tool-call-delta"
	}
	tm := time0
	for k, m := range members {
		if k > 0 {
			g, _ := dt[k-1].(json.Number).Int64()
			tm += g
		}
		chunk := map[string]any{"type": chunkType, "index": d["index"]}
		if typ == "tool-call-chunks" {
			chunk["id"] = d["id"]
			if name, ok := d["name"]; ok {
				chunk["name"] = name
			}
			chunk["argumentsDelta"] = m
		} else {
			chunk["text"] = m
		}
		want, _ := json.Marshal(map[string]any{"turn": d["turn"], "step": d["step"], "chunk": chunk})
		i := seq0 + int64(k)
		if i >= int64(len(events)) {
			t.Fatalf("line %d member %d: no event", line, k)
		}
		e := events[i]
		if e.Type != "assistant/chunk" || e.Seq != i || e.Time != tm || !jsonEqual(t, e.Data, want) {
			t.Fatalf("line %d member %d: got %s seq %d time %d data %s, want assistant/chunk seq %d time %d data %s",
				line, k, e.Type, e.Seq, e.Time, e.Data, i, tm, want)
		}
	}
	return seq0 + int64(len(members))
}

// TestFixturesUnpackedChunksMatchExpansion checks the expansion against
// what dsh itself writes: unpacked text/tool-call deltas in the fixtures
// have exactly the bytes our packed-row expansion produces.
func TestFixturesUnpackedChunksMatchExpansion(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	checked := 0
	for _, p := range names {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var w struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}
			if json.Unmarshal(sc.Bytes(), &w) != nil || w.Type != chunkEventType {
				continue
			}
			e := persistence.Event{Type: w.Type, Data: w.Data}
			if !bytes.Contains(e.Data, []byte(`-delta"`)) {
				continue
			}
			if _, ok := packable(&e); !ok {
				t.Errorf("%s: dsh delta %s is not reproduced by packed-row expansion", filepath.Base(p), e.Data)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no unpacked deltas found in the fixtures")
	}
}

// TestFixturesRoundTrip writes every loaded fixture back through a Store,
// plain, packed and zstd, in several batches, and loads it again.
func TestFixturesRoundTrip(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	modes := []struct {
		name   string
		comp   Compression
		packed bool
	}{
		{"plain", CompressionNone, false},
		{"packed", CompressionNone, true},
		{"zstd", CompressionZstd, true},
	}
	for _, p := range names {
		name := filepath.Base(p)
		t.Run(name, func(t *testing.T) {
			_, log, err := loadFixture(t, dir, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					ctx := context.Background()
					st, err := New(Options{Root: t.TempDir(), Compression: m.comp, Packed: m.packed, BatchDelay: time.Hour})
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					// Batches of 1, 7 and 40 events, flushed every other batch,
					// give several durable units per log.
					sizes := []int{1, 7, 40}
					for i, b := 0, 0; i < len(log.Events); b++ {
						n := min(sizes[b%len(sizes)], len(log.Events)-i)
						if err := st.Append(ctx, log.Header, log.Events[i:i+n]...); err != nil {
							t.Fatalf("Append(events %d..%d) = %v", i, i+n, err)
						}
						i += n
						if b%2 == 1 {
							if err := st.Flush(ctx); err != nil {
								t.Fatal(err)
							}
						}
					}
					if err := st.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					got, err := st.Load(ctx, log.Header.ID)
					if len(log.Events) == 0 {
						// A session that never appends leaves nothing to load.
						if !errors.Is(err, persistence.ErrNotFound) {
							t.Fatalf("Load(%q) = %v, want ErrNotFound", log.Header.ID, err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got.Header, log.Header) {
						t.Fatalf("header %+v, want %+v", got.Header, log.Header)
					}
					sameEvents(t, got.Events, log.Events)
				})
			}
		})
	}
}

// TestFixturesPackedWriteMatchesDsh writes each fixture in one packed
// batch and compares the file with the bytes dsh wrote: every event line
// and packed row must be identical (so runs are packed exactly where dsh
// packs them), except that dsh sometimes orders the optional surfaceOp
// before sourceEventSeqs, where the lines must hold the same JSON. The
// header line differs only by the delegationDepth we always write.
func TestFixturesPackedWriteMatchesDsh(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, p := range names {
		name := filepath.Base(p)
		t.Run(name, func(t *testing.T) {
			data, log, err := loadFixture(t, dir, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(log.Events) == 0 {
				// A header-only log: a store that is never appended to
				// writes nothing (TestLazyCreation covers that).
				t.Logf("%s has no events: nothing to write", name)
				return
			}
			ctx := context.Background()
			st, err := New(Options{Root: t.TempDir(), Packed: true, BatchDelay: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Append(ctx, log.Header, log.Events...); err != nil {
				t.Fatal(err)
			}
			if err := st.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			loc, _ := st.Locate(log.Header)
			out, err := os.ReadFile(loc.Path)
			if err != nil {
				t.Fatal(err)
			}
			want := bytes.Split(data, []byte("\n"))
			got := bytes.Split(out, []byte("\n"))
			if len(got) != len(want) {
				t.Fatalf("wrote %d lines, dsh wrote %d", len(got), len(want))
			}
			for i := 1; i < len(want); i++ {
				if bytes.Equal(got[i], want[i]) {
					continue
				}
				reordered := bytes.Index(want[i], []byte(`"surfaceOp"`)) < bytes.Index(want[i], []byte(`"sourceEventSeqs"`))
				if !reordered || !jsonEqual(t, got[i], want[i]) {
					t.Fatalf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
				}
			}
		})
	}
}
