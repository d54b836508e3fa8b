// Package codex is the Codex hook dialect: the configuration grammar of
// Codex hook files and the payloads its hook scripts read (DESIGN §3.10).
//
// Payloads are byte for byte what dsh's Codex bridge
// (@deepseek-ai/dsh-hooks-codex) writes: compact JSON without a trailing
// newline, keys in this order: session_id ("" for an event with no
// agent), transcript_path (the JSONL path Locate gives, or null when there
// is none), cwd (the session's, else the harness process's),
// hook_event_name, model, permission_mode ("default" unless set), then per
// event: SessionStart source; UserPromptSubmit turn_id, prompt; PreToolUse
// turn_id, tool_name, tool_input {command}, tool_use_id; PostToolUse the
// same plus tool_response; Stop turn_id, stop_hook_active,
// last_assistant_message (null when unknown). tool_input.command is the
// arguments' command when it is a string, else "". The harness's "bash"
// tool is presented as "Bash" (DESIGN §3.10; docs/dsh-compatibility.md). Matchers are regular expressions;
// "timeoutSec" is another spelling of "timeout"; async hooks are skipped.
//
// It imports hooks, session, persistence and sandbox only; cmd/dsh-sandbox,
// the agent loop and the service may import it.
package codex

import (
	"encoding/json"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Name is the dialect's name on the command line.
const Name = "codex"

// Dialect is the Codex dialect. The zero value is ready to use and safe
// for concurrent use.
type Dialect struct{}

var _ hooks.Dialect = Dialect{}

// Name returns "codex".
func (Dialect) Name() string { return Name }

// otherEvents are the event names Codex (checked: 0.169.0) knows besides
// the five dsh fires: a hooks file that configures them is accepted, and
// their hooks never run.
var otherEvents = []string{"PreModelRequest", "PermissionRequest", "PreCompact", "PostCompact",
	"SessionEnd", "SubagentStart", "SubagentStop", "Interrupt"}

// Syntax: Codex's events (those dsh does not fire, otherEvents, are
// accepted and never run), regex matchers, timeoutSec, async skipped.
func (Dialect) Syntax() hooks.Syntax {
	fired := []string{hooks.SessionStart, hooks.UserPromptSubmit, hooks.PreToolUse, hooks.PostToolUse, hooks.Stop}
	return hooks.Syntax{Events: append(fired, otherEvents...), Fired: fired, TimeoutSec: true, SkipAsync: true}
}

// ToolName presents the harness's "bash" as "Bash"; other names are kept.
func (Dialect) ToolName(internal string) string {
	if internal == "bash" {
		return "Bash"
	}
	return internal
}

// Payload returns the stdin bytes of a Codex hook for ev, byte for byte
// what dsh's Codex bridge writes.
func (Dialect) Payload(ev hooks.Event, loc persistence.Locator) ([]byte, error) {
	var transcript any // null when unknown
	if path, ok := hooks.TranscriptPath(ev, loc); ok {
		transcript = path
	}
	mode := ev.PermissionMode
	if mode == "" {
		mode = "default"
	}
	fields := []hooks.Field{
		{Key: "session_id", Value: hooks.SessionID(ev)},
		{Key: "transcript_path", Value: transcript},
		{Key: "cwd", Value: hooks.PayloadCwd(ev)},
		{Key: "hook_event_name", Value: ev.Name},
		{Key: "model", Value: ev.Model},
		{Key: "permission_mode", Value: mode},
	}
	switch ev.Name {
	case hooks.SessionStart:
		fields = append(fields, hooks.Field{Key: "source", Value: ev.Source})
	case hooks.UserPromptSubmit:
		fields = append(fields, hooks.Field{Key: "turn_id", Value: ev.TurnID}, hooks.Field{Key: "prompt", Value: ev.Prompt})
	case hooks.PreToolUse, hooks.PostToolUse:
		if ev.ToolName == "" {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "tool_name: required on %s", ev.Name)
		}
		cmd, err := hooks.CommandOf(ev.ToolInput)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: %v", ev.Name, err)
		}
		fields = append(fields,
			hooks.Field{Key: "turn_id", Value: ev.TurnID},
			hooks.Field{Key: "tool_name", Value: ev.ToolName},
			hooks.Field{Key: "tool_input", Value: json.RawMessage(`{"command":` + string(cmd) + `}`)},
			hooks.Field{Key: "tool_use_id", Value: ev.ToolUseID})
		if ev.Name == hooks.PostToolUse {
			fields = append(fields, hooks.Field{Key: "tool_response", Value: ev.ToolResponse})
		}
	case hooks.Stop:
		var last any // null when unknown
		if ev.LastAssistantMessage != nil {
			last = *ev.LastAssistantMessage
		}
		fields = append(fields,
			hooks.Field{Key: "turn_id", Value: ev.TurnID},
			hooks.Field{Key: "stop_hook_active", Value: ev.StopHookActive},
			hooks.Field{Key: "last_assistant_message", Value: last})
	default:
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "hook_event_name: %q is not a Codex event", ev.Name)
	}
	b, err := hooks.EncodeObject(fields...)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s payload: %v", ev.Name, err)
	}
	return b, nil
}

// Env returns no variables: Codex hooks get only the sandbox's base env.
func (Dialect) Env(hooks.Event, string) []string { return nil }
