// Package claudecode is the Claude Code hook dialect: the configuration
// grammar of Claude Code's settings files and the payloads its hook
// scripts read (DESIGN §3.10).
//
// Payloads are byte for byte what dsh's Claude Code bridge
// (@deepseek-ai/dsh-hooks-claude-code) writes: compact JSON followed by
// "\n", keys in this order: session_id ("" for an event with no agent),
// transcript_path (the JSONL path Locate gives, "" when there is none),
// cwd (the session's, else the harness process's), hook_event_name, then
// per event: PreToolUse tool_name, tool_input, tool_use_id; PostToolUse
// tool_name, tool_input, tool_use_id, tool_response; UserPromptSubmit
// prompt; SessionStart source; Stop stop_hook_active; SubagentStart
// agent_id, agent_type; SubagentStop agent_id, agent_type,
// stop_hook_active (the subagent events describe the child session).
// tool_input is the arguments re-serialized as JavaScript does
// (session.JSValue). The one deliberate difference: the harness's "bash"
// tool is presented as "Bash" (DESIGN §3.10; docs/dsh-compatibility.md). Hooks get CLAUDE_PROJECT_DIR (the session
// cwd) and, when set, CLAUDE_PLUGIN_ROOT; ${CLAUDE_PROJECT_DIR} and
// ${CLAUDE_PLUGIN_ROOT} in commands are replaced by them.
//
// It imports hooks, session, persistence and sandbox only; cmd/dsh-sandbox,
// the agent loop and the service may import it.
package claudecode

import (
	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Name is the dialect's name on the command line.
const Name = "claude-code"

// Dialect is the Claude Code dialect. The zero value is ready to use and
// safe for concurrent use.
type Dialect struct{}

var _ hooks.Dialect = Dialect{}

// Name returns "claude-code".
func (Dialect) Name() string { return Name }

// otherEvents are the event names Claude Code (checked: 2.1.328) knows
// besides those dsh fires: a settings file that configures them is
// accepted, and their hooks never run.
var otherEvents = []string{"PostToolUseFailure", "PostToolBatch", "Notification", "UserPromptExpansion",
	"SessionEnd", "StopFailure", "PreCompact", "PostCompact", "PreModelSwitch", "PostModelSwitch",
	"PermissionRequest", "PermissionDenied", "Setup", "TeammateIdle", "TaskCreated", "TaskCompleted",
	"Elicitation", "ElicitationResult", "ConfigChange", "WorktreeCreate", "WorktreeRemove",
	"InstructionsLoaded", "CwdChanged", "FileChanged", "DirectoryAdded", "MessageDisplay"}

// Syntax: Claude Code's events (those dsh does not fire, otherEvents,
// are accepted and never run), exact-alternation matchers and the
// ${CLAUDE_*} substitutions.
func (Dialect) Syntax() hooks.Syntax {
	fired := []string{hooks.SessionStart, hooks.UserPromptSubmit, hooks.PreToolUse, hooks.PostToolUse,
		hooks.Stop, hooks.SubagentStart, hooks.SubagentStop}
	return hooks.Syntax{
		Events:        append(fired, otherEvents...),
		Fired:         fired,
		ExactMatchers: true,
	}
}

// ToolName presents the harness's "bash" as "Bash"; other names are kept.
func (Dialect) ToolName(internal string) string {
	if internal == "bash" {
		return "Bash"
	}
	return internal
}

// Payload returns the stdin bytes of a Claude Code hook for ev, byte for
// byte what dsh's Claude Code bridge writes.
func (Dialect) Payload(ev hooks.Event, loc persistence.Locator) ([]byte, error) {
	path, _ := hooks.TranscriptPath(ev, loc)
	fields := []hooks.Field{
		{Key: "session_id", Value: hooks.SessionID(ev)},
		{Key: "transcript_path", Value: path},
		{Key: "cwd", Value: hooks.PayloadCwd(ev)},
		{Key: "hook_event_name", Value: ev.Name},
	}
	switch ev.Name {
	case hooks.PreToolUse, hooks.PostToolUse:
		if ev.ToolName == "" {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "tool_name: required on %s", ev.Name)
		}
		input, err := hooks.CompactObject(ev.ToolInput)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: %v", ev.Name, err)
		}
		fields = append(fields,
			hooks.Field{Key: "tool_name", Value: ev.ToolName},
			hooks.Field{Key: "tool_input", Value: input},
			hooks.Field{Key: "tool_use_id", Value: ev.ToolUseID})
		if ev.Name == hooks.PostToolUse {
			fields = append(fields, hooks.Field{Key: "tool_response", Value: ev.ToolResponse})
		}
	case hooks.UserPromptSubmit:
		fields = append(fields, hooks.Field{Key: "prompt", Value: ev.Prompt})
	case hooks.SessionStart:
		fields = append(fields, hooks.Field{Key: "source", Value: ev.Source})
	case hooks.Stop:
		fields = append(fields, hooks.Field{Key: "stop_hook_active", Value: ev.StopHookActive})
	case hooks.SubagentStart, hooks.SubagentStop:
		agentType := ev.AgentType
		if agentType == "" {
			agentType = hooks.DefaultAgentType
		}
		fields = append(fields, hooks.Field{Key: "agent_id", Value: ev.AgentID}, hooks.Field{Key: "agent_type", Value: agentType})
		if ev.Name == hooks.SubagentStop {
			fields = append(fields, hooks.Field{Key: "stop_hook_active", Value: ev.StopHookActive})
		}
	default:
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "hook_event_name: %q is not a Claude Code event dsh-sandbox fires", ev.Name)
	}
	b, err := hooks.EncodeObject(fields...)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s payload: %v", ev.Name, err)
	}
	return append(b, '\n'), nil
}

// Env returns CLAUDE_PROJECT_DIR (the session's cwd, when ev has one; dsh
// sets none for an event without an agent or cwd) and CLAUDE_PLUGIN_ROOT
// (when pluginRoot is set).
func (Dialect) Env(ev hooks.Event, pluginRoot string) []string {
	var env []string
	if ev.Session != nil && ev.Session.Cwd != "" {
		env = append(env, "CLAUDE_PROJECT_DIR="+ev.Session.Cwd)
	}
	if pluginRoot != "" {
		env = append(env, "CLAUDE_PLUGIN_ROOT="+pluginRoot)
	}
	return env
}
