//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// codexVersion is the pinned Codex CLI (integrations/codex).
const codexVersion = "0.169.0"

// codexEvents are the hook events Codex 0.169.0 knows; the test records
// every one that fires.
var codexEvents = []string{"PreModelRequest", "PreToolUse", "PermissionRequest", "PostToolUse",
	"PreCompact", "PostCompact", "SessionStart", "SessionEnd", "SubagentStart", "SubagentStop",
	"Interrupt", "UserPromptSubmit", "Stop"}

// codexDifferences are the differences between Codex 0.169.0's hook
// payloads and dsh-sandbox's codex dialect (which writes what dsh's Codex
// bridge writes), as docs/dsh-compatibility.md lists them.
var codexDifferences = []string{
	"every event: transcript_path: values differ",
	"UserPromptSubmit: order: agent session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, prompt; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, model, permission_mode, turn_id, prompt",
	"PreModelRequest: not built by dsh-sandbox (not an event its dialect fires)",
	"PreToolUse(mcp tool): order: agent session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, tool_name, tool_input, tool_use_id; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, model, permission_mode, turn_id, tool_name, tool_input, tool_use_id",
	"PostToolUse(mcp tool): order: agent session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, tool_name, tool_input, tool_response, tool_use_id; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, model, permission_mode, turn_id, tool_name, tool_input, tool_use_id, tool_response",
	"PostToolUse(mcp tool): tool_response: agent sends a object, dsh-sandbox a string",
	"PreToolUse(mcp tool): tool_input: values differ",
	"PostToolUse(mcp tool): tool_input: values differ",
	"PreToolUse(Bash): order: agent session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, tool_name, tool_input, tool_use_id; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, model, permission_mode, turn_id, tool_name, tool_input, tool_use_id",
	"PostToolUse(Bash): order: agent session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, tool_name, tool_input, tool_response, tool_use_id; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, model, permission_mode, turn_id, tool_name, tool_input, tool_use_id, tool_response",
	"Stop: order: agent session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, stop_hook_active, last_assistant_message; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, model, permission_mode, turn_id, stop_hook_active, last_assistant_message",
	"Stop: last_assistant_message: agent sends a string, dsh-sandbox a null",
	"SessionEnd: not built by dsh-sandbox (not an event its dialect fires)",
}

// codexRootSettings and codexTables are the settings, besides docs/mcp.md's MCP server
// block, that point Codex at the replay model and keep it off the
// network (docs/mcp.md, "Keyless, against a scripted model").
const codexRootSettings = `model = "replay"
model_provider = "replay"
check_for_update_on_startup = false
`

const codexTables = `
[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
apps = false
remote_plugin = false

[model_providers.replay]
name = "replay"
base_url = "BASE_URL"
env_key = "REPLAY_API_KEY"
wire_api = "responses"
`

// TestCodexDrivesMCP runs `codex exec` keyless against the replay model,
// with dsh-sandbox configured as docs/mcp.md says, through a turn of
// foreground, background, refused and job_output calls; and compares the
// payloads of Codex's own hooks with dsh-sandbox's.
func TestCodexDrivesMCP(t *testing.T) {
	codex := requireAgent(t, "codex", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")
	s := newAgentSandbox(t)
	tool := func(name string) map[string]any { return map[string]any{"namespace": "mcp__dsh_sandbox", "name": name} }
	builtin := map[string]any{"id": "call_builtin", "name": "exec_command", "arguments": map[string]any{"cmd": "sleep 2; echo hi"}}
	base := s.startReplay(t, mcpScript(tool, builtin))

	codexHome := filepath.Join(s.home, ".codex")
	config := codexRootSettings + "\n" + docBlock(t, "## Codex", "toml") + strings.Replace(codexTables, "BASE_URL", base, 1)
	if err := os.MkdirAll(codexHome, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	hooksFile := filepath.Join(codexHome, "hooks.json")
	writeJSONFile(t, hooksFile, s.recordingHooks(t, codexEvents, ".*"))

	env := s.env(base, "REPLAY_API_KEY=none")
	// --strict-config: every setting above is one Codex knows. The hooks
	// are the test's own; Codex runs new hooks only once trusted.
	out, stderr := s.runAgent(t, env, codex, "exec", "--strict-config", "--skip-git-repo-check",
		"--dangerously-bypass-hook-trust", "Run the checks.")
	if !strings.Contains(out, "All done.") {
		t.Errorf("codex exec printed %q (stderr %q), want the model's last text", out, stderr)
	}
	reqs := s.modelRequests(t, "/v1/responses")
	// The Responses wire has no error flag on a function_call_output:
	// Codex tells its model by the text, and reports the call failed.
	checkMCPTurn(t, reqs, filepath.Join(s.home, ".dsh"), false, codexToolResult)
	if n := strings.Count(stderr, "mcp: dsh-sandbox/bash (failed)"); n != 1 {
		t.Errorf("codex exec reported %d failed bash calls, want 1 (the refused one):\n%s", n, stderr)
	}

	payloads := s.recordedPayloads(t)
	t.Logf("Codex %s fired %s", codexVersion, strings.Join(eventsSeen(payloads), ", "))
	diffs := comparePayloads(t, payloads, "codex", hooksFile, filepath.Join(s.home, ".dsh"))
	checkDifferences(t, "Codex "+codexVersion, diffs, codexDifferences)
}

// codexToolResult finds the function_call_output item of call id in a
// Responses request: its text (the wire has no error flag).
func codexToolResult(t *testing.T, body json.RawMessage, id string) (string, bool) {
	t.Helper()
	var req struct {
		Input []struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("request body: %v", err)
	}
	for _, it := range req.Input {
		if it.Type != "function_call_output" || it.CallID != id {
			continue
		}
		var text string
		if json.Unmarshal(it.Output, &text) != nil {
			var parts []struct{ Text string }
			_ = json.Unmarshal(it.Output, &parts)
			for _, p := range parts {
				text += p.Text
			}
		}
		return text, false
	}
	t.Errorf("no function_call_output for %s in the request", id)
	return "", false
}
