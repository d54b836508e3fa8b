package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// hooksDirs are a test's hook configuration directory, workspace, sessions
// root and sandbox state, kept apart so that no mount overlaps another.
type hooksDirs struct{ conf, ws, root, state, data string }

func newHooksDirs(t *testing.T) hooksDirs {
	t.Helper()
	base := t.TempDir()
	// The oci backend's mapped container root must search the state
	// directory's ancestors (t.TempDir makes them 0700).
	for _, dir := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	d := hooksDirs{
		conf: filepath.Join(base, "conf"), ws: filepath.Join(base, "ws"), root: filepath.Join(base, "sessions"),
		state: filepath.Join(base, "state"), data: filepath.Join(base, "data"),
	}
	for _, dir := range []string{d.conf, d.ws} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d hooksDirs) writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(d.conf, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (d hooksDirs) args(dialect, config, event string, extra ...string) []string {
	return append([]string{"hooks", "run", "--dialect", dialect, "--config", config, "--event", event,
		"--sessions-root", d.root, "--cwd", d.ws, "--state-dir", d.state, "--data-dir", d.data}, extra...)
}

// hooksNeedSandbox skips without root and runc, except in CI.
func hooksNeedSandbox(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("runc")
	if os.Geteuid() == 0 && err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("hooks tests need root and runc in CI (scripts/setup.sh installs runc)")
	}
	t.Skip("needs root and runc to run hooks in the oci sandbox")
}

func TestHooksDryRunCreatesNothingCase(t *testing.T) {
	d := newHooksDirs(t)
	cfg := d.writeConfig(t, "hooks.json", `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"command":"touch `+d.ws+`/ran"}]}]}}`)
	h := session.Header{ID: "s1", Cwd: d.ws}
	wantPath := jsonl.Path(d.root, h, jsonl.CompressionZstd) // dsh's default compression
	tests := []struct {
		dialect, event string
		newline        bool
	}{
		{"claude-code", "SessionStart", true}, {"claude-code", "UserPromptSubmit", true},
		{"claude-code", "PreToolUse", true}, {"claude-code", "PostToolUse", true}, {"claude-code", "Stop", true},
		{"claude-code", "SubagentStart", true}, {"claude-code", "SubagentStop", true},
		{"codex", "SessionStart", false}, {"codex", "UserPromptSubmit", false}, {"codex", "PreToolUse", false},
		{"codex", "PostToolUse", false}, {"codex", "Stop", false},
	}
	for _, tt := range tests {
		t.Run(tt.dialect+"-"+tt.event, func(t *testing.T) {
			out, errOut, code := run(t, d.args(tt.dialect, cfg, tt.event, "--session-id", "s1", "--dry-run",
				"--tool-input", `{"command":"ls"}`)...)
			if code != 0 {
				t.Fatalf("hooks run --dry-run exited %d: %s", code, errOut)
			}
			if strings.HasSuffix(out, "\n") != tt.newline || strings.Count(out, "\n") > 1 {
				t.Errorf("dry-run stdout %q: trailing newline = %v, want %v", out, !tt.newline, tt.newline)
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatalf("dry-run stdout %q is not one JSON object: %v", out, err)
			}
			if p["transcript_path"] != wantPath || p["session_id"] != "s1" || p["hook_event_name"] != tt.event {
				t.Errorf("dry-run payload %v, want transcript_path %q, session s1, event %s", p, wantPath, tt.event)
			}
		})
	}
	// Nothing was created: no sessions root, no marker, no state.
	for _, p := range []string{d.root, d.state, filepath.Join(d.ws, "ran")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after --dry-run; computing payloads must create nothing", p)
		}
	}
	// The same holds on an existing, empty sessions root.
	if err := os.Mkdir(d.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, d.args("codex", cfg, "PreToolUse", "--session-id", "s1", "--dry-run")...); code != 0 {
		t.Fatalf("hooks run --dry-run exited %d: %s", code, errOut)
	}
	assertEmptyDir(t, d.root)
}

func TestHooksDryRunJSONAndSQLite(t *testing.T) {
	d := newHooksDirs(t)
	cfg := d.writeConfig(t, "hooks.json", `{"PreToolUse":[{"matcher":"^Ba","hooks":[{"command":"a","timeoutSec":2}]}]}`)
	out, errOut, code := run(t, d.args("codex", cfg, "PreToolUse", "--session-id", "s1", "--dry-run", "--json",
		"--persistence", "sqlite", "--sqlite-path", filepath.Join(d.conf, "x.sqlite"))...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var plan struct {
		Stdin string
		Hooks []struct {
			Place     string
			TimeoutMs int64
		}
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.Stdin, `"transcript_path":null`) || len(plan.Hooks) != 1 || plan.Hooks[0].TimeoutMs != 2000 {
		t.Errorf("dry-run --json = %s, want transcript_path null and one hook of 2000ms", out)
	}
	if _, err := os.Stat(filepath.Join(d.conf, "x.sqlite")); err == nil {
		t.Errorf("--dry-run with sqlite created the database")
	}
}

func TestHooksBadConfigRunsNothingCase(t *testing.T) {
	d := newHooksDirs(t)
	good := `{"matcher":"Bash","hooks":[{"command":"touch ` + d.ws + `/ran"}]}`
	tests := []struct{ name, cfg, place string }{
		{"unknown event", `{"hooks":{"PreToolUse":[` + good + `],"PreTool":[]}}`, `hooks.PreTool: unknown event name`},
		{"invalid regex", `{"hooks":{"PreToolUse":[` + good + `,{"matcher":"(Bash","hooks":[]}]}}`, `hooks.PreToolUse[1].matcher: event PreToolUse: invalid pattern "(Bash"`},
		{"non-command type", `{"hooks":{"PreToolUse":[` + good + `,{"hooks":[{"type":"exec","command":"x"}]}]}}`, `hooks.PreToolUse[1].hooks[0].type`},
		{"negative timeout", `{"hooks":{"PreToolUse":[` + good + `,{"hooks":[{"command":"x","timeout":-1}]}]}}`, `hooks.PreToolUse[1].hooks[0].timeout: must not be negative`},
	}
	for _, dialect := range []string{"claude-code", "codex"} {
		for _, tt := range tests {
			t.Run(dialect+"-"+tt.name, func(t *testing.T) {
				cfg := d.writeConfig(t, "bad.json", tt.cfg)
				_, errOut, code := run(t, d.args(dialect, cfg, "PreToolUse", "--session-id", "s1")...)
				if code != 2 || !strings.Contains(errOut, tt.place) || !strings.Contains(errOut, cfg) {
					t.Errorf("hooks run with %s = exit %d, stderr %q; want 2 naming %s and %q", tt.name, code, errOut, cfg, tt.place)
				}
			})
		}
	}
	if _, err := os.Stat(filepath.Join(d.ws, "ran")); err == nil {
		t.Errorf("a hook ran although the configuration was rejected")
	}
	if _, err := os.Stat(d.state); err == nil {
		t.Errorf("the sandbox was started although the configuration was rejected")
	}
}

func TestHooksRunDecodesRealHooks(t *testing.T) {
	hooksNeedSandbox(t)
	d := newHooksDirs(t)
	cfg := d.writeConfig(t, "settings.json", `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[
		{"command":"cat >/dev/null; echo 'rm is not allowed' >&2; exit 2"},
		{"command":"echo '{\"hookSpecificOutput\":{\"permissionDecision\":\"deny\",\"permissionDecisionReason\":\"policy says no\",\"additionalContext\":\"ctx\"},\"systemMessage\":\"hello\"}'"},
		{"command":"echo '{\"hookSpecificOutput\":{\"permissionDecision\":\"ask\"}}'"},
		{"command":"echo '{\"decision\": \"block\"'"},
		{"command":"echo broken >&2; exit 3"},
		{"command":"head -c 50000000 /dev/zero | tr '\\0' x; echo '{\"decision\":\"block\"}'"},
		{"command":"sleep 60", "timeout": 1},
		{"command":"env | grep -c '^DSH_' || true; echo \"$CLAUDE_PROJECT_DIR|$PWD\"; test -r `+d.conf+`/settings.json && echo conf-visible"}
	]}]}}`)
	out, errOut, code := run(t, d.args("claude-code", cfg, "PreToolUse", "--session-id", "s1", "--json",
		"--tool-input", `{"command":"rm -rf /"}`)...)
	if code != 2 {
		t.Fatalf("hooks run exited %d, want 2 (denied); stderr %s", code, errOut)
	}
	var o hooks.Outcome
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("outcome %q: %v", out, err)
	}
	if o.Decision != hooks.Block || o.Reason != "rm is not allowed\npolicy says no" {
		t.Errorf("decision %q reason %q, want block with both reasons joined", o.Decision, o.Reason)
	}
	if o.AdditionalContext != "ctx" || o.SystemMessage != "hello" || len(o.Hooks) != 8 {
		t.Fatalf("outcome %+v, want context ctx, message hello, 8 hooks", o)
	}
	h := o.Hooks
	if h[2].Decision != hooks.Ask {
		t.Errorf("ask hook = %+v", h[2])
	}
	if h[3].Decision != "" || h[3].Output == "" || h[3].Error != "" {
		t.Errorf("malformed JSON hook = %+v, want plain output, no decision", h[3])
	}
	if h[4].ExitCode == nil || *h[4].ExitCode != 3 || !strings.Contains(h[4].Error, "broken") || h[4].Decision != "" {
		t.Errorf("exit 3 hook = %+v, want a non-blocking error with stderr", h[4])
	}
	if !h[5].OutputTruncated || len(h[5].Output) > sandbox.DefaultStdoutMaxBytes || h[5].Decision != "" {
		t.Errorf("50 MB hook: truncated %v, %d bytes kept, decision %q; want the tail as plain output", h[5].OutputTruncated, len(h[5].Output), h[5].Decision)
	}
	if !strings.HasSuffix(h[5].Output, `{"decision":"block"}`+"\n") {
		t.Errorf("50 MB hook kept %q…, want the tail", h[5].Output[len(h[5].Output)-40:])
	}
	if h[6].ExitCode != nil || !strings.Contains(h[6].Error, "timed out after 1000ms") {
		t.Errorf("timeout hook = %+v, want killed, non-blocking", h[6])
	}
	if want := "0\n" + d.ws + "|" + d.ws + "\nconf-visible\n"; h[7].Output != want {
		t.Errorf("env hook printed %q, want %q (no DSH_*, CLAUDE_PROJECT_DIR and cwd = workspace, config visible)", h[7].Output, want)
	}
	// Running hooks did not create the session.
	if _, err := os.Stat(d.root); err == nil {
		t.Errorf("running hooks created the sessions root %s", d.root)
	}
}

func TestHooksRunTextOutput(t *testing.T) {
	hooksNeedSandbox(t)
	d := newHooksDirs(t)
	cfg := d.writeConfig(t, "hooks.json", `{"hooks":{"UserPromptSubmit":[{"hooks":[{"command":"jq -r .prompt"}]}]}}`)
	out, errOut, code := run(t, d.args("codex", cfg, "UserPromptSubmit", "--prompt", "fix it")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"decision: \n", "additionalContext: fix it\n", "hook hooks.UserPromptSubmit[0].hooks[0]: exit 0 in "} {
		if !strings.Contains(out, want) {
			t.Errorf("hooks run printed %q, want it to contain %q", out, want)
		}
	}
}

func TestHooksPluginRootMounted(t *testing.T) {
	hooksNeedSandbox(t)
	d := newHooksDirs(t)
	plugin := t.TempDir()
	if err := os.WriteFile(filepath.Join(plugin, "p.sh"), []byte("echo plugin ran in \"$CLAUDE_PLUGIN_ROOT\"\ntouch \"$CLAUDE_PLUGIN_ROOT/x\" 2>/dev/null || echo read-only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CLAUDE_PLUGIN_ROOT", plugin)
	cfg := d.writeConfig(t, "hooks.json", `{"hooks":{"Stop":[{"hooks":[{"command":"bash ${CLAUDE_PLUGIN_ROOT}/p.sh"}]}]}}`)
	out, errOut, code := run(t, d.args("claude-code", cfg, "Stop", "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var o hooks.Outcome
	if err := json.Unmarshal([]byte(out), &o); err != nil || len(o.Hooks) != 1 {
		t.Fatalf("outcome %q: %v", out, err)
	}
	if want := "plugin ran in " + plugin + "\nread-only\n"; o.Hooks[0].Output != want || o.Hooks[0].Command != "bash ${CLAUDE_PLUGIN_ROOT}/p.sh" {
		t.Errorf("plugin hook %q printed %q, want %q (the command as written; its shell expands the placeholder)", o.Hooks[0].Command, o.Hooks[0].Output, want)
	}
}
