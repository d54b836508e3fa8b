//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// claudeVersion is the pinned Claude Code (integrations/claude-code).
const claudeVersion = "2.1.328"

// claudeEvents are the hook events Claude Code 2.1.328 knows; the test
// records every one that fires.
var claudeEvents = []string{"PreToolUse", "PostToolUse", "PostToolUseFailure", "PostToolBatch",
	"Notification", "UserPromptSubmit", "UserPromptExpansion", "SessionStart", "SessionEnd", "Stop",
	"StopFailure", "SubagentStart", "SubagentStop", "PreCompact", "PostCompact", "PreModelSwitch",
	"PostModelSwitch", "PermissionRequest", "PermissionDenied", "Setup", "TeammateIdle", "TaskCreated",
	"TaskCompleted", "Elicitation", "ElicitationResult", "ConfigChange", "WorktreeCreate",
	"WorktreeRemove", "InstructionsLoaded", "CwdChanged", "FileChanged", "DirectoryAdded", "MessageDisplay"}

// claudeDifferences are the differences between Claude Code 2.1.328's
// hook payloads and dsh-sandbox's claude-code dialect (which writes what
// dsh's Claude Code bridge writes), as docs/dsh-compatibility.md lists
// them.
var claudeDifferences = []string{
	"every event: transcript_path: values differ",
	"UserPromptSubmit: only the agent sends prompt_id, permission_mode",
	"MessageDisplay: not built by dsh-sandbox (not an event its dialect fires)",
	"PreToolUse(mcp tool): only the agent sends prompt_id, permission_mode, effort, mcp_server",
	"PostToolUse(mcp tool): only the agent sends prompt_id, permission_mode, effort, duration_ms, mcp_server",
	"PostToolUse(mcp tool): order: agent session_id, transcript_path, cwd, hook_event_name, tool_name, tool_input, tool_response, tool_use_id; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, tool_name, tool_input, tool_use_id, tool_response",
	"PostToolBatch: not built by dsh-sandbox (not an event its dialect fires)",
	"PostToolUseFailure: not built by dsh-sandbox (not an event its dialect fires)",
	"PreToolUse(Bash): only the agent sends prompt_id, permission_mode, effort",
	"PostToolUse(Bash): only the agent sends prompt_id, permission_mode, effort, duration_ms",
	"PostToolUse(Bash): order: agent session_id, transcript_path, cwd, hook_event_name, tool_name, tool_input, tool_response, tool_use_id; dsh-sandbox session_id, transcript_path, cwd, hook_event_name, tool_name, tool_input, tool_use_id, tool_response",
	"PostToolUse(Bash): tool_response: agent sends a object, dsh-sandbox a string",
	"Stop: only the agent sends prompt_id, permission_mode, effort, last_assistant_message, background_tasks, session_crons",
	"SessionEnd: not built by dsh-sandbox (not an event its dialect fires)",
}

// TestClaudeCodeDrivesMCP runs `claude -p` keyless against the replay
// model, with dsh-sandbox registered as docs/mcp.md says, through a turn
// of foreground, background, refused and job_output calls; and compares
// the payloads of Claude Code's own hooks with dsh-sandbox's.
func TestClaudeCodeDrivesMCP(t *testing.T) {
	claude := requireAgent(t, "claude-code", "@anthropic-ai", "claude-code-linux-x64", "claude")
	s := newAgentSandbox(t)
	// `claude` on PATH, as the documented commands call it.
	if err := os.Symlink(claude, filepath.Join(s.agentBin(), "claude")); err != nil {
		t.Fatal(err)
	}
	tool := func(name string) map[string]any { return map[string]any{"name": "mcp__dsh-sandbox__" + name} }
	builtin := map[string]any{"id": "call_builtin", "name": "Bash", "arguments": map[string]any{"command": "sleep 2; echo hi", "description": "Wait, then say hi"}}
	base := s.startReplay(t, mcpScript(tool, builtin))

	settings := s.recordingHooks(t, claudeEvents, "*")
	settingsFile := filepath.Join(s.home, ".claude", "settings.json")
	writeJSONFile(t, settingsFile, settings)

	env := s.env(base,
		"ANTHROPIC_BASE_URL="+strings.TrimSuffix(base, "/v1"),
		"ANTHROPIC_API_KEY=none",
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")

	// docs/mcp.md's registration with a fixed session, run as written.
	var add string
	for _, line := range strings.Split(strings.ReplaceAll(docBlock(t, "## Claude Code", "sh"), "\\\n", " "), "\n") {
		if strings.Contains(line, "--session-id") {
			add = line
		}
	}
	if !strings.HasPrefix(add, "claude mcp add ") {
		t.Fatalf("docs/mcp.md's Claude Code block has no `claude mcp add … --session-id` line: %q", add)
	}
	out, _ := s.runAgent(t, env, "sh", "-c", add)
	if !strings.Contains(out, "dsh-sandbox") {
		t.Errorf("claude mcp add: %q", out)
	}

	out, stderr := s.runAgent(t, env, "claude", "-p", "Run the checks.", "--allowedTools",
		"mcp__dsh-sandbox__bash", "mcp__dsh-sandbox__job_output", "mcp__dsh-sandbox__job_kill", "Bash")
	if !strings.Contains(out, "All done.") {
		t.Errorf("claude -p printed %q (stderr %q), want the model's last text", out, stderr)
	}
	reqs := s.modelRequests(t, "/v1/messages")
	for _, r := range reqs {
		if r.Query != "beta=true" {
			t.Errorf("request %d query %q", r.Seq, r.Query)
		}
	}
	checkMCPTurn(t, reqs, filepath.Join(s.home, ".dsh"), true, claudeToolResult)

	payloads := s.recordedPayloads(t)
	t.Logf("Claude Code %s fired %s", claudeVersion, strings.Join(eventsSeen(payloads), ", "))
	diffs := comparePayloads(t, payloads, "claude-code", settingsFile, filepath.Join(s.home, ".dsh"))
	checkDifferences(t, "Claude Code "+claudeVersion, diffs, claudeDifferences)
}

// claudeToolResult finds the tool_result block of call id in a Messages
// request: its text and is_error.
func claudeToolResult(t *testing.T, body json.RawMessage, id string) (string, bool) {
	t.Helper()
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		t.Fatalf("request body: %v", err)
	}
	type block struct {
		Type      string          `json:"type"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
	}
	// Usually in the last message; Claude Code may add one after it.
	var blocks []block
	for _, m := range req.Messages {
		var more []block
		_ = json.Unmarshal(m.Content, &more) // a string content has no blocks
		blocks = append(blocks, more...)
	}
	for _, b := range blocks {
		if b.Type != "tool_result" || b.ToolUseID != id {
			continue
		}
		var text string
		if json.Unmarshal(b.Content, &text) != nil {
			var parts []struct{ Text string }
			_ = json.Unmarshal(b.Content, &parts)
			for _, p := range parts {
				text += p.Text
			}
		}
		return text, b.IsError
	}
	t.Errorf("no tool_result for %s in the request", id)
	return "", false
}

// writeJSONFile writes v as JSON to path, making its directory.
func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
