package hooks

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestPlanRunRedactsPayload: a secret of the service's environment in the
// payload (a command the agent ran, a tool response) does not reach the
// hook's stdin; a redact file that cannot be read runs no hook.
func TestPlanRunRedactsPayload(t *testing.T) {
	const secret = "hook-secret-0123456789"
	t.Setenv("HOOKTEST_API_TOKEN", secret)
	zero := 0
	r := &recordingRunner{answers: map[string]*sandbox.Result{"check": {ExitCode: &zero}}}
	p := &Dispatch{
		Event:       Event{Name: PreToolUse},
		Stdin:       []byte(`{"tool_input":{"command":"echo ` + secret + `"}}`),
		Invocations: []Invocation{{Hook: Hook{Command: "check", Timeout: time.Second, Place: "hooks.PreToolUse[0].hooks[0]"}}},
	}
	if _, err := p.Run(t.Context(), RunOptions{Runner: r, Policy: sandbox.Policy{Name: "p", Backend: "local"}}); err != nil {
		t.Fatal(err)
	}
	if len(r.reqs) != 1 {
		t.Fatalf("ran %d hooks, want 1", len(r.reqs))
	}
	if got := string(r.reqs[0].Stdin); strings.Contains(got, secret) || !strings.Contains(got, "echo [REDACTED:HOOKTEST_API_TOKEN]") {
		t.Errorf("hook stdin = %s, want the secret replaced by its marker", got)
	}
	if !bytes.Contains(p.Stdin, []byte(secret)) {
		t.Error("Run changed the plan's own payload")
	}

	r = &recordingRunner{}
	out, err := p.Run(t.Context(), RunOptions{Runner: r, Policy: sandbox.Policy{Name: "p", Backend: "local", RedactFiles: []string{"/nonexistent/key"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.reqs) != 0 || len(out.Hooks) != 1 || out.Decision != Block {
		t.Errorf("with an unreadable redact file: %d hooks ran, outcome %+v, want none and a blocking result", len(r.reqs), out)
	}
}

// TestPlanRunDetectorRedactsPayload: under a policy with
// RedactDetectors, what RunOptions.Detector finds in the payload does not
// reach the hook's stdin; without it, the payload is as it was.
func TestPlanRunDetectorRedactsPayload(t *testing.T) {
	zero := 0
	p := &Dispatch{
		Event:       Event{Name: PreToolUse},
		Stdin:       []byte(`{"tool_input":{"command":"echo tok_0123456789"}}`),
		Invocations: []Invocation{{Hook: Hook{Command: "check", Timeout: time.Second, Place: "hooks.PreToolUse[0].hooks[0]"}}},
	}
	for _, tc := range []struct {
		detectors bool
		want      string
	}{{true, `{"tool_input":{"command":"echo [REDACTED:tok]"}}`}, {false, string(p.Stdin)}} {
		r := &recordingRunner{answers: map[string]*sandbox.Result{"check": {ExitCode: &zero}}}
		pol := sandbox.Policy{Name: "p", Backend: "local", RedactDetectors: tc.detectors}
		if _, err := p.Run(t.Context(), RunOptions{Runner: r, Policy: pol, Detector: calls.Detector{}}); err != nil {
			t.Fatal(err)
		}
		if len(r.reqs) != 1 {
			t.Fatalf("RedactDetectors %v: ran %d hooks, want 1", tc.detectors, len(r.reqs))
		}
		if got := string(r.reqs[0].Stdin); got != tc.want {
			t.Errorf("RedactDetectors %v: hook stdin %q, want %q", tc.detectors, got, tc.want)
		}
	}
}

// TestPlanRunDetectorsWithoutDetector: under a policy with
// RedactDetectors and no RunOptions.Detector, no hook runs (its payload
// could not be redacted as the policy asks) and the outcome blocks,
// saying why: redact.detectors.
func TestPlanRunDetectorsWithoutDetector(t *testing.T) {
	zero := 0
	p := &Dispatch{
		Event:       Event{Name: PreToolUse},
		Stdin:       []byte(`{"tool_input":{"command":"echo tok_0123456789"}}`),
		Invocations: []Invocation{{Hook: Hook{Command: "check", Timeout: time.Second, Place: "hooks.PreToolUse[0].hooks[0]"}}},
	}
	r := &recordingRunner{answers: map[string]*sandbox.Result{"check": {ExitCode: &zero}}}
	pol := sandbox.Policy{Name: "p", Backend: "local", RedactDetectors: true}
	out, err := p.Run(t.Context(), RunOptions{Runner: r, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.reqs) != 0 || len(out.Hooks) != 1 || out.Decision != Block || !strings.Contains(out.Reason, "redact.detectors") {
		t.Errorf("redact.detectors without a detector: %d hooks ran, outcome %+v; want none and a blocking result naming redact.detectors", len(r.reqs), out)
	}
}
