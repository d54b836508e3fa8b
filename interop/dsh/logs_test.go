//go:build dshinterop

package dshinterop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/sqlite"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// randLogHeader returns a valid random header (no "" optional values,
// which session.Header cannot carry).
func randLogHeader(r *rand.Rand) session.Header {
	h := session.Header{ID: randShort(r), CreatedAt: r.Int64N(1 << 53), DelegationDepth: r.IntN(4)}
	if r.IntN(4) > 0 {
		h.Cwd = randPath(r)
		for len(jsonl.ProjectKey(h.Cwd)) > 255 {
			h.Cwd = randPath(r)
		}
	}
	if r.IntN(3) == 0 {
		h.ParentSession = randString(r)
	}
	if r.IntN(4) == 0 {
		n := r.Int64N(1000)
		h.SeedLength = &n
	}
	if r.IntN(4) == 0 {
		h.Origin = session.OriginSubagent
	}
	if r.IntN(4) == 0 {
		h.AgentPreset = randString(r)
	}
	return h
}

// headerObject is h as a JSON object for the driver.
func headerObject(h session.Header) json.RawMessage {
	b, err := h.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return b
}

// randEvents returns n events with contiguous seqs whose data is written
// as JavaScript writes it: turn starts, titles, ignorable extension events
// and runs of text, reasoning and tool-call delta chunks (which both
// stores pack into chunk rows when a run has three or more members).
func randEvents(r *rand.Rand, n int) []persistence.Event {
	var events []persistence.Event
	t := r.Int64N(1 << 41)
	add := func(typ, data string, ignorable bool) {
		events = append(events, persistence.Event{Type: typ, Seq: int64(len(events)), Time: t, Data: json.RawMessage(data), Ignorable: ignorable})
		t += r.Int64N(2000) - 100
	}
	turn, step := 1, 0
	for len(events) < n {
		switch r.IntN(6) {
		case 0:
			turn++
			add("turn/start", fmt.Sprintf(`{"turn":%d}`, turn), false)
		case 1:
			add("session/title", `{"title":`+jsString(randString(r))+`}`, false)
		case 2:
			// Data spelled as JavaScript would not: both stores write
			// what JSON.stringify makes of it.
			add("x-interop/extension", `{"v":[`+jsString(randShort(r))+`,1.5,true,null], "w" : `+randJSON(r, 0)+`}`, true)
		default:
			step++
			kind := []string{"text-delta", "reasoning-delta", "tool-call-delta"}[r.IntN(3)]
			index := r.IntN(3)
			id, name := "call_"+strconv.Itoa(r.IntN(1000)), ""
			if r.IntN(2) == 0 {
				name = "bash"
			}
			for range 1 + r.IntN(6) {
				var chunk string
				if kind == "tool-call-delta" {
					chunk = fmt.Sprintf(`{"type":"tool-call-delta","index":%d,"id":%s`, index, jsString(id))
					if name != "" {
						chunk += `,"name":` + jsString(name)
					}
					chunk += `,"argumentsDelta":` + jsString(randString(r)) + `}`
				} else {
					chunk = fmt.Sprintf(`{"type":%q,"index":%d,"text":%s}`, kind, index, jsString(randString(r)))
				}
				add("assistant/chunk", fmt.Sprintf(`{"turn":%d,"step":%d,"chunk":%s}`, turn, step, chunk), false)
			}
		}
	}
	return events
}

// batches cuts events into one to three contiguous batches.
func batches(r *rand.Rand, events []persistence.Event) [][]persistence.Event {
	cuts := []int{0}
	for range r.IntN(3) {
		cuts = append(cuts, 1+r.IntN(len(events)))
	}
	cuts = append(cuts, len(events))
	slices.Sort(cuts)
	var out [][]persistence.Event
	for i := 1; i < len(cuts); i++ {
		if cuts[i] > cuts[i-1] {
			out = append(out, events[cuts[i-1]:cuts[i]])
		}
	}
	return out
}

// eventValue is an event as a comparable value: its JSON as JavaScript
// reads it (1e400 is Infinity, which JSON writes as null), decoded.
func eventValue(e any) any {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	if b, err = session.JSValue(b); err != nil {
		panic(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		panic(err)
	}
	return v
}

// plaintext is a log file's JSONL text: the file itself, or its zstd
// frames decoded.
func plaintext(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, ".zstd") {
		return data
	}
	dec, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	out, err := io.ReadAll(dec)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

// TestLogsCrossLoad: whole logs (plain and zstd, with packed chunk rows,
// written in one to three batches) written by dsh's JSONL store load in
// dsh-sandbox's with the same header and events, logs written by
// dsh-sandbox's store load in dsh's (which also restores the session from
// them), and both stores write the same JSONL text for the same batches.
func TestLogsCrossLoad(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "logs")
	n := caseCount(t)
	base := t.TempDir()
	ctx := context.Background()
	type logCase struct {
		h       session.Header
		events  []persistence.Event
		comp    jsonl.Compression
		dshRoot string
		ourRoot string
	}
	lcs := make([]logCase, n)
	writes := make([]map[string]any, n)
	for i := range lcs {
		h := randLogHeader(r)
		events := randEvents(r, 1+r.IntN(30))
		comp := []jsonl.Compression{jsonl.CompressionZstd, jsonl.CompressionNone}[r.IntN(2)]
		lc := logCase{h: h, events: events, comp: comp,
			dshRoot: filepath.Join(base, "dsh", fmt.Sprint(i)), ourRoot: filepath.Join(base, "ours", fmt.Sprint(i))}
		bs := batches(r, events)
		writes[i] = map[string]any{"op": "write", "root": lc.dshRoot, "compression": string(comp), "header": headerObject(h), "batches": bs}
		st, err := jsonl.New(jsonl.Options{Root: lc.ourRoot, Compression: comp, Packed: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if err := st.Append(ctx, h, b...); err != nil {
				t.Fatalf("Append: %v", err)
			}
			if err := st.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
		st.Close()
		lcs[i] = lc
	}
	diffs := newDifferences("logs", n)
	wrote := d.run(t, writes)
	loads := make([]map[string]any, n)
	for i, lc := range lcs {
		loads[i] = map[string]any{"op": "load", "root": lc.ourRoot, "compression": string(lc.comp), "id": lc.h.ID}
	}
	loaded := d.run(t, loads)
	packed := 0 // logs with packed chunk rows
	for i, lc := range lcs {
		want := make([]any, len(lc.events))
		for k, e := range lc.events {
			want[k] = eventValue(e)
		}
		show := func(what string, got any) string {
			return fmt.Sprintf("%s: header %s, %d events %s, compression %s\n  got %v", what, headerObject(lc.h), len(lc.events), mustJSON(lc.events), lc.comp, got)
		}
		// dsh wrote it; dsh-sandbox loads it.
		if !wrote[i].OK {
			diffs.add(show("dsh could not write", string(wrote[i].raw)))
			continue
		}
		st, err := jsonl.New(jsonl.Options{Root: lc.dshRoot, Compression: lc.comp})
		if err != nil {
			t.Fatal(err)
		}
		log, err := st.Load(ctx, lc.h.ID)
		st.Close()
		switch {
		case err != nil:
			diffs.add(show("dsh-sandbox cannot load dsh's log", err))
		case !reflect.DeepEqual(log.Header, lc.h):
			diffs.add(show("dsh-sandbox loads dsh's header as", log.Header))
		case !reflect.DeepEqual(eventValue(log.Events), any(want)):
			diffs.add(show("dsh-sandbox loads dsh's events as", mustJSON(log.Events)))
		}
		// dsh-sandbox wrote it; dsh loads it.
		var got struct {
			Header dshHeader `json:"header"`
			Events []any     `json:"events"`
		}
		_ = json.Unmarshal(loaded[i].raw, &got)
		switch {
		case !loaded[i].OK:
			diffs.add(show("dsh cannot load dsh-sandbox's log", string(loaded[i].raw)))
		case !reflect.DeepEqual(got.Header.ours(), lc.h):
			diffs.add(show("dsh loads dsh-sandbox's header as", got.Header.ours()))
		case !reflect.DeepEqual(eventValue(got.Events), any(want)):
			diffs.add(show("dsh loads dsh-sandbox's events as", mustJSON(got.Events)))
		}
		// Both wrote the same text.
		dshText := plaintext(t, jsonl.Path(lc.dshRoot, lc.h, lc.comp))
		ourText := plaintext(t, jsonl.Path(lc.ourRoot, lc.h, lc.comp))
		if bytes.Contains(dshText, []byte(`-chunks","seq0"`)) {
			packed++
		}
		if !bytes.Equal(dshText, ourText) {
			diffs.add(show("the stores write different text", fmt.Sprintf("dsh %q\n  ours %q", dshText, ourText)))
		}
	}
	if packed < n/4 {
		t.Errorf("logs: only %d of %d logs have packed chunk rows: the generator no longer covers them", packed, n)
	}
	t.Logf("logs: %d of %d logs have packed chunk rows", packed, n)
	diffs.report(t)
}

// withoutIgnorable is events as dsh's SQLite store keeps them: it stores
// no ignorable flag (documented in docs/dsh-compatibility.md).
func withoutIgnorable(events []persistence.Event) ([]persistence.Event, bool) {
	out := slices.Clone(events)
	dropped := false
	for i := range out {
		dropped = dropped || out[i].Ignorable
		out[i].Ignorable = false
	}
	return out, dropped
}

// TestSQLiteCrossLoad: a session written by dsh's SQLite store loads in
// dsh-sandbox's with the same header and events, and one written by
// dsh-sandbox's store loads in dsh's (which restores the session from
// it). dsh's store keeps no ignorable flag: that difference is counted
// as documented, not hidden.
func TestSQLiteCrossLoad(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "sqlite")
	n := caseCount(t)
	base := t.TempDir()
	ctx := context.Background()
	// One database per writer, one session per case.
	dshPath, ourPath := filepath.Join(base, "dsh.sqlite"), filepath.Join(base, "ours.sqlite")
	type sqlCase struct {
		h      session.Header
		events []persistence.Event
	}
	scs := make([]sqlCase, n)
	writes := make([]map[string]any, n)
	loads := make([]map[string]any, n)
	ours, err := sqlite.Open(ctx, sqlite.Options{Path: ourPath})
	if err != nil {
		t.Fatal(err)
	}
	for i := range scs {
		sc := sqlCase{h: randLogHeader(r), events: randEvents(r, 1+r.IntN(20))}
		// NUL bytes (which dsh's reader cuts at) in one case of ten only,
		// so that the comparison of the others is not masked.
		for i%10 != 0 && strings.Contains(string(headerObject(sc.h))+mustJSON(sc.events), `\u0000`) {
			sc = sqlCase{h: randLogHeader(r), events: randEvents(r, 1+r.IntN(20))}
		}
		sc.h.ID += "#" + strconv.Itoa(i) // one session per case
		bs := batches(r, sc.events)
		writes[i] = map[string]any{"op": "sqliteWrite", "path": dshPath, "header": headerObject(sc.h), "batches": bs}
		loads[i] = map[string]any{"op": "sqliteLoad", "path": ourPath, "id": sc.h.ID}
		for _, b := range bs {
			if err := ours.Append(ctx, sc.h, b...); err != nil {
				t.Fatalf("Append: %v", err)
			}
		}
		scs[i] = sc
	}
	if err := ours.Close(); err != nil {
		t.Fatal(err)
	}
	wrote := d.run(t, writes)
	loaded := d.run(t, loads)
	theirs, err := sqlite.Open(ctx, sqlite.Options{Path: dshPath})
	if err != nil {
		t.Fatalf("dsh-sandbox cannot open dsh's database: %v", err)
	}
	defer theirs.Close()
	diffs := newDifferences("sqlite", n)
	for i, sc := range scs {
		kept, dropped := withoutIgnorable(sc.events)
		if dropped {
			diffs.allow("dsh's SQLite store keeps no ignorable flag; dsh-sandbox's keeps it in an extra column")
		}
		want := eventValue(kept)
		show := func(what string, got any) string {
			return fmt.Sprintf("%s: header %s, events %s\n  got %v", what, headerObject(sc.h), mustJSON(sc.events), got)
		}
		if !wrote[i].OK {
			diffs.add(show("dsh could not write", string(wrote[i].raw)))
		} else {
			log, err := theirs.Load(ctx, sc.h.ID)
			switch {
			case err != nil:
				diffs.add(show("dsh-sandbox cannot load dsh's session", err))
			case !reflect.DeepEqual(log.Header, sc.h):
				diffs.add(show("dsh-sandbox loads dsh's header as", log.Header))
			case !reflect.DeepEqual(eventValue(log.Events), want):
				diffs.add(show("dsh-sandbox loads dsh's events as", mustJSON(log.Events)))
			}
		}
		var got struct {
			Header dshHeader `json:"header"`
			Events []any     `json:"events"`
		}
		_ = json.Unmarshal(loaded[i].raw, &got)
		nul := strings.Contains(string(headerObject(sc.h))+mustJSON(sc.events), `\u0000`)
		switch {
		case nul && (!loaded[i].OK || !reflect.DeepEqual(got.Header.ours(), sc.h) || !reflect.DeepEqual(eventValue(got.Events), want)):
			diffs.allow("dsh's SQLite reader (node:sqlite) cuts text at a NUL byte; dsh-sandbox keeps the whole value")
		case !loaded[i].OK:
			diffs.add(show("dsh cannot load dsh-sandbox's session", string(loaded[i].raw)))
		case !reflect.DeepEqual(got.Header.ours(), sc.h):
			diffs.add(show("dsh loads dsh-sandbox's header as", got.Header.ours()))
		case !reflect.DeepEqual(eventValue(got.Events), want):
			diffs.add(show("dsh loads dsh-sandbox's events as", mustJSON(got.Events)))
		}
	}
	diffs.report(t)
}
