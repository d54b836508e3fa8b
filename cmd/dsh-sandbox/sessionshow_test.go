package main

import (
	"context"
	"encoding/json"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

var placeholder = regexp.MustCompile(`\{\{[A-Za-z0-9_]+\}\}`)

func TestSessionShowFixtures(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) < 40 {
		t.Fatalf("found %d fixture logs (%v), want 40", len(files), err)
	}
	tmp := t.TempDir()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.ReplaceAll(string(raw), "{{sessionId}}", "session-fixture")
			text = strings.ReplaceAll(text, "{{cwd}}", "/srv/fixture")
			text = placeholder.ReplaceAllString(text, "placeholder")
			path := filepath.Join(tmp, filepath.Base(f))
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			lines := strings.Count(strings.TrimRight(text, "\n"), "\n") // events, packed rows counted once
			out, errOut, code := run(t, "session", "show", "--json", path)
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
