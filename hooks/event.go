package hooks

import (
	"encoding/json"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Event names shared by both dialects, plus the subagent events of
// Claude Code.
const (
	SessionStart     = "SessionStart"
	UserPromptSubmit = "UserPromptSubmit"
	PreToolUse       = "PreToolUse"
	PostToolUse      = "PostToolUse"
	Stop             = "Stop"
	SubagentStart    = "SubagentStart"
	SubagentStop     = "SubagentStop"
)

// Event is one occurrence hooks are run for, in the harness's own terms;
// a Dialect turns it into a payload. The zero value is not valid: Name is
// required. An Event is a plain value, safe to copy.
type Event struct {
	// Name is the event name, such as PreToolUse.
	Name string
	// Session is the header of the agent the event belongs to; nil means
	// an event with no agent (session_id is then empty and there is no
	// transcript). On SubagentStart and SubagentStop it is the child's
	// header, nil when the child is unknown.
	Session *session.Header
	// Cwd is the session's working directory; it is the hook's working
	// directory and Claude Code's project directory. Empty means none.
	Cwd string
	// ProcessCwd is the harness process's working directory. dsh names it
	// as the payload's cwd when the event has no agent or the session has
	// no cwd; empty means Cwd.
	ProcessCwd string
	// AgentID and AgentType name the subagent on SubagentStart and
	// SubagentStop (agent_id, agent_type); an empty AgentType is sent as
	// DefaultAgentType, the only value dsh sends.
	AgentID   string
	AgentType string
	// ToolName is the harness's name of the tool ("bash") on tool events;
	// the dialect presents it under its own name ("Bash").
	ToolName string
	// ToolInput is the tool's arguments as a JSON object, such as
	// {"command":"ls"}; nil means {}.
	ToolInput json.RawMessage
	// ToolUseID identifies the tool call; empty is sent as "".
	ToolUseID string
	// ToolResponse is the text the tool returned (PostToolUse), sent as a
	// JSON string.
	ToolResponse string
	// Prompt is the user's prompt (UserPromptSubmit).
	Prompt string
	// Source is why the session started (SessionStart): "startup",
	// "resume", "clear" or "compact".
	Source string
	// StopHookActive is true when the agent is already continuing because
	// of a stop hook (Stop, SubagentStop). dsh always sends false.
	StopHookActive bool
	// Model, PermissionMode and TurnID are the turn facts Codex sends; an
	// empty PermissionMode is sent as "default", as dsh always does.
	Model          string
	PermissionMode string
	TurnID         string
	// LastAssistantMessage is the text of the agent's last message
	// (Codex Stop); nil is sent as null, as dsh does.
	LastAssistantMessage *string
}

// DefaultAgentType is the agent_type dsh's Claude Code bridge reports for
// every subagent: Claude Code's own default for its Task tool.
const DefaultAgentType = "general-purpose"

// PayloadCwd returns the cwd a payload names, as dsh computes it: the
// session's cwd, else (no agent, or a session without a cwd) the harness
// process's working directory.
func PayloadCwd(ev Event) string {
	if ev.Session != nil && ev.Session.Cwd != "" {
		return ev.Session.Cwd
	}
	if ev.ProcessCwd != "" {
		return ev.ProcessCwd
	}
	return ev.Cwd
}

// TranscriptPath returns the JSONL transcript path of ev's session, or
// ok=false when the event has no agent, loc is nil, or the store has no
// per-session local JSONL file (SQLite).
func TranscriptPath(ev Event, loc persistence.Locator) (path string, ok bool) {
	if ev.Session == nil || loc == nil {
		return "", false
	}
	l, ok := loc.Locate(*ev.Session)
	if !ok || l.Kind != persistence.KindJSONL || l.Path == "" {
		return "", false
	}
	return l.Path, true
}

// SessionID returns the id of ev's session, or "" for an event with no
// agent.
func SessionID(ev Event) string {
	if ev.Session == nil {
		return ""
	}
	return ev.Session.ID
}
