package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// TestSessionShowFixtures shows every real dsh log, plain and zstd: each
// prints a header that parses and at least one event per line of the log
// after the header (a packed row counts once). A zstd log is counted by
// the lines of its plain twin, the same conversation written plain.
func TestSessionShowFixtures(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	plain, err1 := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	zstd, err2 := filepath.Glob(filepath.Join(dir, "*.jsonl.zstd"))
	if err := errors.Join(err1, err2); err != nil || len(plain) < 6 || len(zstd) < 2 {
		t.Fatalf("found %d plain and %d zstd fixture logs (%v), want at least 6 and 2", len(plain), len(zstd), err)
	}
	for _, f := range append(plain, zstd...) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			text, err := os.ReadFile(strings.TrimSuffix(f, ".zstd"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Count(strings.TrimRight(string(text), "\n"), "\n") // events, packed rows counted once
			out, errOut, code := run(t, "session", "show", "--json", f)
			if code != 0 {
				t.Fatalf("session show %s exited %d: %s", f, code, errOut)
			}
			var sum struct {
				Header json.RawMessage `json:"header"`
				Events int             `json:"events"`
			}
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("session show --json printed %q: %v", out, err)
			}
			if sum.Events < lines {
				t.Errorf("session show %s: %d events, want at least %d (one per line after the header)", f, sum.Events, lines)
			}
			if _, err := session.Parse(sum.Header); err != nil {
				t.Errorf("printed header does not parse: %v", err)
			}
		})
	}
}

func TestSessionShowZstdWrittenByStore(t *testing.T) {
	root := t.TempDir()
	store, err := jsonl.New(jsonl.Options{Root: root, Compression: jsonl.CompressionZstd})
	if err != nil {
		t.Fatal(err)
	}
	h := session.Header{ID: "session-zstd", CreatedAt: 1, Cwd: "/srv/proj"}
	ctx := context.Background()
	for seq := range int64(5) {
		ev := persistence.Event{Type: "user/message", Seq: seq, Time: 10 + seq, Data: json.RawMessage(`{"turn":` + string(rune('1'+seq)) + `}`)}
		if err := store.Append(ctx, h, ev); err != nil {
			t.Fatal(err)
		}
		if err := store.Flush(ctx); err != nil { // one frame per durable batch
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	loc, _ := store.Locate(h)
	if !strings.HasSuffix(loc.Path, "session.jsonl.zstd") {
		t.Fatalf("Locate = %q, want a .zstd path", loc.Path)
	}
	out, errOut, code := run(t, "session", "show", loc.Path)
	if code != 0 {
		t.Fatalf("session show exited %d: %s", code, errOut)
	}
	for _, want := range []string{`"id":"session-zstd"`, "events: 5", "last turn: 5", "user/message"} {
		if !strings.Contains(out, want) {
			t.Errorf("session show output lacks %q:\n%s", want, out)
		}
	}
}
