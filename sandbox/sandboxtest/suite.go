package sandboxtest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Bounds the suite puts on calls so that a broken backend fails a case
// instead of hanging the test binary.
const (
	// callTimeoutMs is Request.TimeoutMs of an ordinary case.
	callTimeoutMs = 60_000
	// callDeadline bounds Executor.Run through its context; it exceeds
	// callTimeoutMs plus the kill grace so that the backend's own timeout
	// fires first.
	callDeadline = 3 * time.Minute
)

// testCase is one conformance case.
type testCase struct {
	name string
	// isolated cases need a container and are skipped for the local
	// baseline (Subject.Isolated false).
	isolated bool
	run      func(t *testing.T, s *suite)
}

// cases lists every case in the order Run runs them. The names are
// stable: backends and CI refer to them with -run.
func cases() []testCase {
	var all []testCase
	for _, group := range [][]testCase{
		envCases(),
		invalidCases(),
		processCases(),
		terminalCases(),
		argvCases(),
		timeoutCases(),
		outputCases(),
		redactCases(),
		mountCases(),
		isolationCases(),
		hardeningCases(), oomCases(),
		concurrencyCases(),
		leftoverCases(),
	} {
		all = append(all, group...)
	}
	return all
}

// Cases returns the names of the suite's cases in the order Run runs
// them; each is a subtest name of Run.
func Cases() []string {
	cs := cases()
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	return names
}

// suite is the state shared by the cases of one Run.
type suite struct {
	cfg  Subject
	exec sandbox.Executor
}

// Run runs every case of Cases against the executor cfg.New returns, each
// as a subtest of t. It runs the cases one after another (several change
// the process environment with t.Setenv); cases that need isolation are
// skipped with a message when cfg.Isolated is false.
func Run(t *testing.T, cfg Subject) {
	t.Helper()
	switch {
	case cfg.New == nil:
		t.Fatal("sandboxtest: Subject.New is nil")
	case cfg.Policy.Name == "":
		t.Fatal("sandboxtest: Subject.Policy.Name is empty")
	case cfg.Policy.Backend == "":
		t.Fatal("sandboxtest: Subject.Policy.Backend is empty")
	}
	e := cfg.New(t)
	if e == nil {
		t.Fatal("sandboxtest: Subject.New returned a nil executor")
	}
	if c, ok := e.(io.Closer); ok {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("close executor: %v", err)
			}
		})
	}
	s := &suite{cfg: cfg, exec: e}
	for name := range cfg.NotApplicable {
		if !slices.Contains(Cases(), name) {
			t.Fatalf("sandboxtest: Subject.NotApplicable names %q, which is not a case", name)
		}
	}
	var notApplicable []string
	for _, c := range cases() {
		if why, ok := cfg.NotApplicable[c.name]; ok {
			t.Logf("case %s does not apply to backend %q: %s", c.name, cfg.Policy.Backend, why)
			continue
		}
		if c.isolated && !cfg.Isolated {
			// The unsandboxed baseline has no isolation to test: these
			// cases are not run at all (rather than skipped), and said so.
			notApplicable = append(notApplicable, c.name)
			continue
		}
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
	if len(notApplicable) > 0 {
		t.Logf("backend %q is not isolated (Subject.Isolated is false): %d isolation cases do not apply: %s",
			cfg.Policy.Backend, len(notApplicable), strings.Join(notApplicable, ", "))
	}
}

// policy returns a deep copy of the base policy that a case may change.
func (s *suite) policy() sandbox.Policy {
	p := s.cfg.Policy
	p.Mounts = slices.Clone(p.Mounts)
	p.Tmpfs = slices.Clone(p.Tmpfs)
	p.EnvInherit = slices.Clone(p.EnvInherit)
	p.EnvSet = maps.Clone(p.EnvSet)
	return p
}

// request is a call of fx's session running command under the base
// policy, with the session's DSH_* snapshot and a one-minute timeout.
func (s *suite) request(fx *fixture, command string) *sandbox.Request {
	return &sandbox.Request{
		Command:   command,
		TimeoutMs: callTimeoutMs,
		DSHEnv:    fx.snapshot(),
		Session: sandbox.Session{
			ID:            fx.SessionID,
			Cwd:           fx.Workspace,
			TranscriptDir: fx.TranscriptDir,
		},
		Policy: s.policy(),
	}
}

// runCtx runs req under ctx bounded by callDeadline and returns what the
// executor returned.
func (s *suite) runCtx(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, callDeadline)
	defer cancel()
	return s.exec.Run(ctx, req)
}

// run runs req and fails the case unless the executor returned a result
// and no error.
func (s *suite) run(t *testing.T, req *sandbox.Request) *sandbox.Result {
	t.Helper()
	res, err := s.runCtx(t.Context(), req)
	if err != nil {
		t.Fatalf("Run(%q) error = %v, want nil", short(req.Command), err)
	}
	if res == nil {
		t.Fatalf("Run(%q) = nil result and nil error", short(req.Command))
	}
	return res
}

// runOK runs req and fails the case unless the command exited 0.
func (s *suite) runOK(t *testing.T, req *sandbox.Request) *sandbox.Result {
	t.Helper()
	res := s.run(t, req)
	wantExit(t, req, res, 0)
	return res
}

// wantExit fails the case unless the command exited with code, neither
// killed nor timed out.
func wantExit(t *testing.T, req *sandbox.Request, res *sandbox.Result, code int) {
	t.Helper()
	if res.ExitCode == nil || *res.ExitCode != code || res.Signal != "" || res.TimedOut || res.Aborted {
		t.Fatalf("Run(%q) = %s, want exit code %d", short(req.Command), describe(res), code)
	}
	if got := sandbox.ExitCode(res, nil); got != code {
		t.Errorf("ExitCode(%s) = %d, want %d", describe(res), got, code)
	}
}

// describe summarises a result for failure messages.
func describe(res *sandbox.Result) string {
	if res == nil {
		return "<nil result>"
	}
	var b strings.Builder
	if res.ExitCode != nil {
		fmt.Fprintf(&b, "exit %d", *res.ExitCode)
	} else {
		b.WriteString("exit <nil>")
	}
	if res.Signal != "" {
		fmt.Fprintf(&b, ", signal %s", res.Signal)
	}
	if res.TimedOut {
		b.WriteString(", timed out")
	}
	if res.Aborted {
		b.WriteString(", aborted")
	}
	fmt.Fprintf(&b, ", stdout %q, stderr %q", short(res.Stdout.Text), short(res.Stderr.Text))
	return b.String()
}

// short clips s for a failure message.
func short(s string) string {
	const max = 300
	if len(s) <= max {
		return s
	}
	return s[:max/2] + "…" + s[len(s)-max/2:]
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// listDir is a shell command printing the names in dir, one a line,
// dot files included. It uses only shell globbing and `[ -e ]`, not ls:
// some runtimes (gVisor) reject the statx flags that ls passes.
func listDir(dir string) string {
	q := shellQuote(dir)
	return "for f in " + q + "/* " + q + "/.[!.]* " + q + "/..?*; do [ -e \"$f\" ] && echo \"${f##*/}\"; done; true"
}

// lines splits text into its non-empty lines.
func lines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
