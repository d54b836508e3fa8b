package codex

import (
	"flag"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks/hookstest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestPayload(t *testing.T) { hookstest.Payload(t, Dialect{}, *update) }

// TestAgentEvents: every hook event Codex 0.169.0 knows (its
// HookEventName variants) may appear in a hooks file.
func TestAgentEvents(t *testing.T) {
	hookstest.AgentEvents(t, Dialect{}, []string{"PreModelRequest", "PreToolUse", "PermissionRequest",
		"PostToolUse", "PreCompact", "PostCompact", "SessionStart", "SessionEnd", "SubagentStart",
		"SubagentStop", "Interrupt", "UserPromptSubmit", "Stop"})
}
