package claudecode

import (
	"flag"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks/hookstest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestPayload(t *testing.T) { hookstest.Payload(t, Dialect{}, *update) }

// TestAgentEvents: every hook event Claude Code 2.1.328 knows (the list
// its own code holds) may appear in a settings file.
func TestAgentEvents(t *testing.T) {
	hookstest.AgentEvents(t, Dialect{}, []string{"PreToolUse", "PostToolUse", "PostToolUseFailure",
		"PostToolBatch", "Notification", "UserPromptSubmit", "UserPromptExpansion", "SessionStart",
		"SessionEnd", "Stop", "StopFailure", "SubagentStart", "SubagentStop", "PreCompact", "PostCompact",
		"PreModelSwitch", "PostModelSwitch", "PermissionRequest", "PermissionDenied", "Setup",
		"TeammateIdle", "TaskCreated", "TaskCompleted", "Elicitation", "ElicitationResult", "ConfigChange",
		"WorktreeCreate", "WorktreeRemove", "InstructionsLoaded", "CwdChanged", "FileChanged",
		"DirectoryAdded", "MessageDisplay"})
}
