// Package codex is the Codex hook dialect: the configuration grammar of
// Codex hook files and the payloads its hook scripts read (DESIGN §3.10).
//
// Payloads are compact JSON without a trailing newline, keys in this
// order: session_id ("" for an event with no agent), turn_id (on the
// turn-scoped events UserPromptSubmit, PreToolUse, PostToolUse and Stop),
// transcript_path (the JSONL path Locate gives, or null when there is
// none), cwd, hook_event_name, model, permission_mode, then per event:
// SessionStart source; UserPromptSubmit prompt; PreToolUse tool_name,
// tool_use_id, tool_input {command}; PostToolUse the same plus
// tool_response; Stop stop_hook_active. Matchers are regular expressions;
// "timeoutSec" is another spelling of "timeout"; async hooks are skipped.
//
// It imports hooks, session, persistence and sandbox only; cmd/dsh-sandbox,
// the agent loop and the service may import it.
package codex

import (
	"encoding/json"
	"fmt"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
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

// Syntax: Codex's five events, regex matchers, timeoutSec, async skipped.
func (Dialect) Syntax() hooks.Syntax {
	events := []string{hooks.SessionStart, hooks.UserPromptSubmit, hooks.PreToolUse, hooks.PostToolUse, hooks.Stop}
	return hooks.Syntax{Events: events, Fired: events, TimeoutSec: true, SkipAsync: true}
}

// ToolName presents the harness's "bash" as "Bash"; other names are kept.
func (Dialect) ToolName(internal string) string {
	if internal == "bash" {
		return "Bash"
	}
	return internal
}

// Payload returns the stdin bytes of a Codex hook for ev.
func (Dialect) Payload(ev hooks.Event, loc hooks.Locator) ([]byte, error) {
	var transcript any // null when unknown
	if path, ok := hooks.TranscriptPath(ev, loc); ok {
		transcript = path
	}
	fields := []hooks.Field{{Key: "session_id", Value: hooks.SessionID(ev)}}
	switch ev.Name {
	case hooks.UserPromptSubmit, hooks.PreToolUse, hooks.PostToolUse, hooks.Stop:
		fields = append(fields, hooks.Field{Key: "turn_id", Value: ev.TurnID})
	case hooks.SessionStart:
	default:
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "hook_event_name: %q is not a Codex event", ev.Name)
	}
	fields = append(fields,
		hooks.Field{Key: "transcript_path", Value: transcript},
		hooks.Field{Key: "cwd", Value: ev.Cwd},
		hooks.Field{Key: "hook_event_name", Value: ev.Name},
		hooks.Field{Key: "model", Value: ev.Model},
		hooks.Field{Key: "permission_mode", Value: ev.PermissionMode},
	)
	switch ev.Name {
	case hooks.SessionStart:
		fields = append(fields, hooks.Field{Key: "source", Value: ev.Source})
	case hooks.UserPromptSubmit:
		fields = append(fields, hooks.Field{Key: "prompt", Value: ev.Prompt})
	case hooks.PreToolUse, hooks.PostToolUse:
		if ev.ToolName == "" {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "tool_name: required on %s", ev.Name)
		}
		cmd, err := command(ev.ToolInput)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: %v", ev.Name, err)
		}
		fields = append(fields,
			hooks.Field{Key: "tool_name", Value: ev.ToolName},
			hooks.Field{Key: "tool_use_id", Value: ev.ToolUseID},
			hooks.Field{Key: "tool_input", Value: struct {
				Command string `json:"command"`
			}{cmd}})
		if ev.Name == hooks.PostToolUse {
			fields = append(fields, hooks.Field{Key: "tool_response", Value: ev.ToolResponse})
		}
	case hooks.Stop:
		fields = append(fields, hooks.Field{Key: "stop_hook_active", Value: ev.StopHookActive})
	}
	b, err := hooks.EncodeObject(fields...)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s payload: %v", ev.Name, err)
	}
	return b, nil
}

// command returns the "command" string of a tool input object; "" when it
// has none.
func command(raw json.RawMessage) (string, error) {
	input, err := hooks.CompactObject(raw)
	if err != nil {
		return "", err
	}
	var v struct {
		Command *json.RawMessage `json:"command"`
	}
	if err := json.Unmarshal(input, &v); err != nil {
		return "", err
	}
	if v.Command == nil {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(*v.Command, &s); err != nil {
		return "", fmt.Errorf("tool_input.command: want a string, got %s", *v.Command)
	}
	return s, nil
}

// Env returns no variables: Codex hooks get only the sandbox's base env.
func (Dialect) Env(hooks.Event, string) []string { return nil }
