package sandboxtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// invalidCases check that malformed requests fail with ErrInvalid before
// anything runs.
func invalidCases() []testCase {
	return []testCase{
		{name: "invalid-negative-timeout", run: invalidCase(func(r *sandbox.Request) { r.TimeoutMs = -1 }, "timeout", "")},
		{name: "invalid-nul-in-env", run: invalidCase(func(r *sandbox.Request) {
			r.Env = []string{"SANDBOXTEST_NUL=hidden-value\x00tail"}
		}, "SANDBOXTEST_NUL", "hidden-value")},
		{name: "invalid-malformed-env", run: invalidCase(func(r *sandbox.Request) { r.Env = []string{"SANDBOXTEST_NO_EQUALS"} }, "env", "")},
		{name: "invalid-empty-env-name", run: invalidCase(func(r *sandbox.Request) { r.Env = []string{"=hidden-value"} }, "env", "hidden-value")},
		{name: "invalid-relative-workdir", run: invalidCase(func(r *sandbox.Request) { r.Workdir = "relative/dir" }, "relative/dir", "")},
		{name: "invalid-relative-session-cwd", run: invalidCase(func(r *sandbox.Request) { r.Session.Cwd = "relative/cwd" }, "relative/cwd", "")},
		{name: "invalid-empty-command", run: invalidCase(func(r *sandbox.Request) { r.Command = "  " }, "command", "")},
		{name: "invalid-snapshot-outside-dsh", run: invalidCase(func(r *sandbox.Request) {
			r.DSHEnv = append(r.DSHEnv, "PATH=/hidden-value")
		}, "PATH", "hidden-value")},
	}
}

// invalidCase returns a case that breaks a request with mutate and checks
// that Run returns an ErrInvalid error whose message contains named
// (case-insensitively) and never leak, and that the command did not run.
func invalidCase(mutate func(*sandbox.Request), named, leak string) func(*testing.T, *suite) {
	return func(t *testing.T, s *suite) {
		fx := newFixture(t)
		ran := filepath.Join(fx.Workspace, "ran")
		req := s.request(fx, "touch "+shellQuote(ran))
		mutate(req)
		res, err := s.runCtx(t.Context(), req)
		if err == nil {
			t.Fatalf("Run(invalid request) = %s, nil error; want an error wrapping sandbox.ErrInvalid", describe(res))
		}
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Run(invalid request) error = %v, want it to wrap sandbox.ErrInvalid", err)
		}
		if got := sandbox.ExitCode(res, err); got != sandbox.ExitUsage {
			t.Errorf("ExitCode(Run(invalid request)) = %d, want %d", got, sandbox.ExitUsage)
		}
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(named)) {
			t.Errorf("Run(invalid request) error = %q, want it to name %q", err, named)
		}
		if leak != "" && strings.Contains(err.Error(), leak) {
			t.Errorf("Run(invalid request) error = %q, which reveals the value %q", err, leak)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Errorf("the command of an invalid request ran (%s exists)", ran)
		}
	}
}
