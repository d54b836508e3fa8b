// Package hookstest holds the payload tests every hook dialect must pass:
// golden payload bytes for every event the dialect fires in three cases
// (JSONL location known, SQLite without a location, no agent), no file or
// directory created while computing a payload, and invalid events refused.
// Only the dialects' tests import it.
package hookstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Payload runs the payload tests for d. Golden files are read from (and,
// with update, written to) testdata/<case>-<event>.golden in the calling
// package's directory.
func Payload(t *testing.T, d hooks.Dialect, update bool) {
	t.Run("golden", func(t *testing.T) { payloadGolden(t, d, update) })
	t.Run("creates-nothing", func(t *testing.T) { payloadCreatesNothing(t, d) })
	t.Run("rejects", func(t *testing.T) { payloadRejects(t, d) })
}

// jsonlLocator stands in for the JSONL store: a path under root, no I/O.
type jsonlLocator struct{ root string }

func (l jsonlLocator) Locate(h session.Header) (persistence.Location, bool) {
	return persistence.Location{Kind: persistence.KindJSONL, Path: filepath.Join(l.root, "--srv-proj--", h.ID, "session.jsonl")}, true
}

// noLocator stands in for SQLite: no per-session local file.
type noLocator struct{}

func (noLocator) Locate(session.Header) (persistence.Location, bool) {
	return persistence.Location{}, false
}

func event(name string, agent bool) hooks.Event {
	ev := hooks.Event{
		Name:           name,
		Cwd:            "/srv/proj",
		ToolName:       "bash",
		ToolInput:      json.RawMessage(`{"command": "rm -rf build && echo <done>", "description": "clean"}`),
		ToolUseID:      "toolu_01",
		ToolResponse:   "removed\n[exit code: 1]",
		Prompt:         "fix the \"build\" ✓",
		Source:         "startup",
		StopHookActive: true,
		Model:          "deepseek-chat",
		PermissionMode: "default",
		TurnID:         "turn-1",
		AgentID:        "agent-1",
	}
	if agent {
		ev.Session = &session.Header{ID: "s1", Cwd: "/srv/proj"}
	}
	return ev
}

func payloadGolden(t *testing.T, d hooks.Dialect, update bool) {
	cases := []struct {
		name  string
		loc   persistence.Locator
		agent bool
	}{
		{"jsonl", jsonlLocator{"/home/u/.dsh/sessions"}, true},
		{"sqlite", noLocator{}, true},
		{"no-agent", jsonlLocator{"/home/u/.dsh/sessions"}, false},
	}
	for _, c := range cases {
		for _, name := range d.Syntax().Fired {
			t.Run(c.name+"-"+name, func(t *testing.T) {
				ev := event(name, c.agent)
				ev.ToolName = d.ToolName(ev.ToolName)
				got, err := d.Payload(ev, c.loc)
				if err != nil {
					t.Fatalf("Payload(%s) = %v", name, err)
				}
				path := filepath.Join("testdata", c.name+"-"+name+".golden")
				if update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("Payload(%s, %s) = %q, want %q", name, c.name, got, want)
				}
				if !json.Valid(got) {
					t.Errorf("Payload(%s, %s) is not valid JSON: %q", name, c.name, got)
				}
			})
		}
	}
}

func payloadCreatesNothing(t *testing.T, d hooks.Dialect) {
	root := filepath.Join(t.TempDir(), "sessions")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range d.Syntax().Fired {
		if _, err := d.Payload(event(name, true), jsonlLocator{root}); err != nil {
			t.Fatalf("Payload(%s) = %v", name, err)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) != 0 {
		t.Errorf("sessions root after Payload: %d entries, %v; want none", len(entries), err)
	}
}

func payloadRejects(t *testing.T, d hooks.Dialect) {
	noTool := event(hooks.PreToolUse, true)
	noTool.ToolName = ""
	badInput := event(hooks.PostToolUse, true)
	badInput.ToolInput = json.RawMessage(`["ls"]`)
	for name, ev := range map[string]hooks.Event{
		"unknown event": {Name: "Notification"},
		"no tool name":  noTool,
		"bad input":     badInput,
	} {
		if _, err := d.Payload(ev, noLocator{}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Payload(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

// AgentEvents checks that a configuration naming every event the agent
// itself knows (agentEvents, as the agent's own version lists them) loads
// in d: the events d fires keep their hooks, the others load with a
// warning that they never run; a name the agent does not know is still
// refused.
func AgentEvents(t *testing.T, d hooks.Dialect, agentEvents []string) {
	t.Helper()
	groups := map[string]any{}
	for _, name := range agentEvents {
		groups[name] = []any{map[string]any{"hooks": []any{map[string]any{"type": "command", "command": "true"}}}}
	}
	data, err := json.Marshal(map[string]any{"hooks": groups})
	if err != nil {
		t.Fatal(err)
	}
	c, err := hooks.Parse(data, d)
	if err != nil {
		t.Fatalf("a configuration with every event of the agent: %v", err)
	}
	fired := d.Syntax().Fired
	var warned int
	for _, name := range agentEvents {
		if len(c.Events[name]) != 1 {
			t.Errorf("event %s: %d groups, want 1", name, len(c.Events[name]))
		}
		if !slices.Contains(fired, name) {
			warned++
		}
	}
	if len(c.Warnings) != warned {
		t.Errorf("warnings %q, want one for each of the %d events never fired", c.Warnings, warned)
	}
	if _, err := hooks.Parse([]byte(`{"hooks":{"PreToolUze":[]}}`), d); err == nil {
		t.Error("an event name the agent does not know loaded; want an error")
	}
}
