//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// hookScripts copies the python3 and bash+jq reader scripts of
// hooks/testdata into a fresh configuration directory, writes one hook
// configuration that runs both on Bash, and returns its path.
func hookScripts(t *testing.T) string {
	t.Helper()
	conf := t.TempDir()
	for _, name := range []string{"reader.py", "reader.sh"} {
		data, err := os.ReadFile(filepath.Join("..", "hooks", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(conf, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[
		{"type":"command","command":"python3 '` + conf + `/reader.py'","timeout":60},
		{"type":"command","command":"bash '` + conf + `/reader.sh'","timeout":60}]}]}}`
	path := filepath.Join(conf, "settings.json")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeTranscript writes a session of two events through the JSONL store,
// as dsh would, and returns its path.
func writeTranscript(t *testing.T, e env, id string) string {
	t.Helper()
	st, err := jsonl.New(jsonl.Options{Root: e.root})
	if err != nil {
		t.Fatal(err)
	}
	h := session.Header{ID: id, CreatedAt: 1700000000000, Cwd: e.workspace}
	evs := []persistence.Event{
		{Type: "user/message", Seq: 0, Time: 1700000000001, Data: json.RawMessage(`{"text":"clean up"}`)},
		{Type: "assistant/message", Seq: 1, Time: 1700000000002, Data: json.RawMessage(`{"text":"ok"}`)},
	}
	if err := st.Append(context.Background(), h, evs...); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	loc, _ := st.Locate(h)
	return loc.Path
}

func TestHooksScriptsReadTheSameInBothDialects(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	cfg := hookScripts(t)
	path := writeTranscript(t, e, "s-hooks")
	command := `grep -rn "TODO" . | head`
	tests := []struct {
		name  string
		flags []string
		want  string
	}{
		// The reader scripts read plain JSONL: these sessions use
		// --compression none (zstd is the default).
		{"jsonl transcript present", append(e.flags("s-hooks"), "--compression", "none"),
			"session_id=s-hooks\ntool_name=Bash\ncommand=" + command + "\ntranscript_path=" + path +
				"\ntranscript=3 lines header=s-hooks events=user/message,assistant/message\n"},
		{"jsonl transcript not yet written", append(e.flags("s-new"), "--compression", "none"),
			"session_id=s-new\ntool_name=Bash\ncommand=" + command + "\ntranscript_path=" +
				jsonl.Path(e.root, session.Header{ID: "s-new", Cwd: e.workspace}, jsonl.CompressionNone) + "\ntranscript=absent\n"},
		{"sqlite", append(e.flags("s-hooks"), "--persistence", "sqlite", "--sqlite-path", filepath.Join(e.home, "s.sqlite")),
			"session_id=s-hooks\ntool_name=Bash\ncommand=" + command + "\ntranscript_path=\ntranscript=absent\n"},
		{"no agent", e.flags(""),
			"session_id=\ntool_name=Bash\ncommand=" + command + "\ntranscript_path=\ntranscript=absent\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, dialect := range []string{"claude-code", "codex"} {
				args := append([]string{"hooks", "run", "--dialect", dialect, "--config", cfg,
					"--event", "PreToolUse", "--tool-input", `{"command":` + jsonString(command) + `,"description":"find todos"}`, "--json"}, tt.flags...)
				r := run(t, nil, args...)
				if r.code != 0 {
					t.Fatalf("%s: hooks run exited %d: %s", dialect, r.code, r.stderr)
				}
				var o hooks.Outcome
				if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
					t.Fatalf("%s: outcome %q: %v", dialect, r.stdout, err)
				}
				if len(o.Hooks) != 2 {
					t.Fatalf("%s: %d hooks ran, want 2: %s", dialect, len(o.Hooks), r.stdout)
				}
				for _, h := range o.Hooks {
					if h.Output != tt.want || h.Error != "" {
						t.Errorf("%s: %s printed %q (error %q), want %q", dialect, h.Command, h.Output, h.Error, tt.want)
					}
				}
			}
		})
	}
	// Hooks of a session that has not written anything did not create it.
	if _, err := os.Stat(filepath.Dir(jsonl.Path(e.root, session.Header{ID: "s-new", Cwd: e.workspace}, jsonl.CompressionNone))); err == nil {
		t.Errorf("running hooks for session s-new created its directory")
	}
}

func TestHooksDenyExitsTwo(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	conf := t.TempDir()
	cfg := filepath.Join(conf, "hooks.json")
	body := `{"PreToolUse":[{"matcher":"^Bash$","hooks":[{"command":"jq -e '.tool_input.command | test(\"rm -rf\")' >/dev/null && { echo 'no rm -rf' >&2; exit 2; } || exit 0","timeoutSec":30}]}]}`
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		command string
		code    int
		out     string
	}{
		{"rm -rf /", 2, "decision: block\nreason: no rm -rf\n"},
		{"ls", 0, "decision: \nreason: \n"},
	} {
		args := append([]string{"hooks", "run", "--dialect", "codex", "--config", cfg, "--event", "PreToolUse",
			"--tool-input", `{"command":` + jsonString(tt.command) + `}`}, e.flags("s1")...)
		r := run(t, nil, args...)
		if r.code != tt.code || !strings.HasPrefix(r.stdout, tt.out) {
			t.Errorf("hooks run for %q = exit %d, %q; want %d, %q…", tt.command, r.code, r.stdout, tt.code, tt.out)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
