package sandboxtest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// processCases check exit codes, signals, stdin, stdout/stderr, the
// working directory and the result's bookkeeping.
func processCases() []testCase {
	return []testCase{
		{name: "exit-code-0", run: exitCase(0)},
		{name: "exit-code-1", run: exitCase(1)},
		{name: "exit-code-42", run: exitCase(42)},
		{name: "exit-code-255", run: exitCase(255)},
		{name: "signal-term", run: signalCase("TERM", "SIGTERM", 143)},
		{name: "signal-kill", run: signalCase("9", "SIGKILL", 137)},
		{name: "stdin-bytes", run: testStdinBytes},
		{name: "stdin-large", run: testStdinLarge},
		{name: "stdin-empty", run: testStdinEmpty},
		{name: "stdin-reader", run: testStdinReader},
		{name: "stdin-reader-open", run: testStdinReaderOpen},
		{name: "stdout-stderr-separate", run: testStdoutStderrSeparate},
		{name: "workdir-default", run: testWorkdirDefault},
		{name: "workdir-explicit", run: testWorkdirExplicit},
		{name: "workdir-no-workspace", run: testWorkdirNoWorkspace},
		{name: "result-sandbox-info", run: testResultSandboxInfo},
		{name: "timeout-resolution", run: testTimeoutResolution},
	}
}

// exitCase: `exit code` yields ExitCode code and no signal.
func exitCase(code int) func(*testing.T, *suite) {
	return func(t *testing.T, s *suite) {
		fx := newFixture(t)
		req := s.request(fx, fmt.Sprintf("echo before-exit; exit %d", code))
		res := s.run(t, req)
		wantExit(t, req, res, code)
		if res.Stdout.Text != "before-exit\n" {
			t.Errorf("stdout = %q, want %q", res.Stdout.Text, "before-exit\n")
		}
	}
}

// signalCase: the shell killing itself with `kill -sig $$` yields a nil
// ExitCode, Signal name and exit status 128+N. The shell must therefore
// not be pid 1 of its pid namespace, whose default-action signals the
// kernel drops.
func signalCase(sig, name string, status int) func(*testing.T, *suite) {
	return func(t *testing.T, s *suite) {
		fx := newFixture(t)
		req := s.request(fx, "kill -"+sig+" $$; echo survived")
		res := s.run(t, req)
		if res.ExitCode != nil || res.Signal != name || res.TimedOut || res.Aborted {
			t.Fatalf("Run(%q) = %s, want ExitCode nil and Signal %s (a shell running as pid 1 of the container ignores signals it has no handler for)", req.Command, describe(res), name)
		}
		if got := sandbox.ExitCode(res, nil); got != status {
			t.Errorf("ExitCode(%s) = %d, want %d", describe(res), got, status)
		}
		if strings.Contains(res.Stdout.Text, "survived") {
			t.Errorf("stdout = %q: the shell survived kill -%s $$", res.Stdout.Text, sig)
		}
	}
}

// allBytes is every byte value once, in order.
func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// testStdinBytes: stdin reaches the command byte for byte.
func testStdinBytes(t *testing.T, s *suite) {
	fx := newFixture(t)
	in := append(bytes.Repeat(allBytes(), 4), "hello\nno trailing newline"...)
	req := s.request(fx, "cat")
	req.Stdin = in
	res := s.runOK(t, req)
	if res.Stdout.Text != string(in) {
		t.Errorf("cat of %d stdin bytes = %d bytes %q, want the input back", len(in), len(res.Stdout.Text), short(res.Stdout.Text))
	}
}

// testStdinLarge: stdin larger than a pipe buffer is delivered whole.
func testStdinLarge(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "wc -c")
	req.Stdin = bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	res := s.runOK(t, req)
	if got := strings.TrimSpace(res.Stdout.Text); got != "1048576" {
		t.Errorf("wc -c of 1 MiB stdin = %q, want %q", got, "1048576")
	}
}

// testStdinEmpty: a nil Stdin is an empty, closed stdin: cat ends at once.
func testStdinEmpty(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "cat; echo done")
	req.TimeoutMs = 20_000
	res := s.runOK(t, req)
	if res.Stdout.Text != "done\n" {
		t.Errorf("stdout = %q, want %q (stdin must be empty and closed)", res.Stdout.Text, "done\n")
	}
}

// testStdinReader: a StdinReader is streamed byte for byte, in
// preference to Stdin, and its EOF is the command's.
func testStdinReader(t *testing.T, s *suite) {
	fx := newFixture(t)
	in := bytes.Repeat(allBytes(), 1<<12) // 1 MiB, every byte value
	req := s.request(fx, "wc -c; echo end")
	req.Stdin = []byte("ignored")
	req.StdinReader = io.MultiReader(bytes.NewReader(in[:len(in)/2]), bytes.NewReader(in[len(in)/2:]))
	res := s.runOK(t, req)
	if got := strings.Fields(res.Stdout.Text); len(got) != 2 || got[0] != fmt.Sprint(len(in)) || got[1] != "end" {
		t.Errorf("wc -c of a %d-byte StdinReader = %q, want %d then end", len(in), res.Stdout.Text, len(in))
	}
	req = s.request(fx, "cat")
	req.StdinReader = bytes.NewReader(in[:4096])
	if res := s.runOK(t, req); res.Stdout.Text != string(in[:4096]) {
		t.Errorf("cat of a StdinReader = %q, want the input back", short(res.Stdout.Text))
	}
}

// testStdinReaderOpen: a call ends when its command does, even though its
// StdinReader never returns (exec -i on a terminal nobody types into).
func testStdinReaderOpen(t *testing.T, s *suite) {
	fx := newFixture(t)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() { _, _ = io.WriteString(pw, "first\nsecond\n") }()
	req := s.request(fx, "head -n1; echo done")
	req.StdinReader = pr
	res := s.runOK(t, req)
	if res.Stdout.Text != "first\ndone\n" {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, "first\ndone\n")
	}
}

// testStdoutStderrSeparate: the two streams are captured apart, exactly.
func testStdoutStderrSeparate(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "echo out; echo err >&2; printf partial; printf 'err2' >&2")
	res := s.runOK(t, req)
	if res.Stdout.Text != "out\npartial" || res.Stderr.Text != "err\nerr2" {
		t.Errorf("stdout, stderr = %q, %q, want %q, %q", res.Stdout.Text, res.Stderr.Text, "out\npartial", "err\nerr2")
	}
	for name, st := range map[string]sandbox.Stream{"stdout": res.Stdout, "stderr": res.Stderr} {
		if st.Truncated || st.DroppedBytes != 0 || st.SpillPath != "" {
			t.Errorf("%s = %+v, want not truncated, nothing dropped, no spill file", name, st)
		}
	}
}

// testWorkdirDefault: with the workspace mounted, the command starts in
// the session's cwd.
func testWorkdirDefault(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "pwd")
	req.Policy.Workspace = "rw"
	res := s.runOK(t, req)
	if got := strings.TrimSpace(res.Stdout.Text); got != fx.Workspace {
		t.Errorf("pwd = %q, want the session cwd %q", got, fx.Workspace)
	}
}

// testWorkdirExplicit: Request.Workdir wins, including a path with a
// space and the root directory.
func testWorkdirExplicit(t *testing.T, s *suite) {
	fx := newFixture(t)
	sub := filepath.Join(fx.Workspace, "sub dir", "deep")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{sub, "/"} {
		req := s.request(fx, "pwd")
		req.Policy.Workspace = "rw"
		req.Workdir = dir
		res := s.runOK(t, req)
		if got := strings.TrimSuffix(res.Stdout.Text, "\n"); got != dir {
			t.Errorf("pwd with Workdir %q = %q, want %q", dir, got, dir)
		}
	}
}

// testWorkdirNoWorkspace: without a workspace mount the default workdir
// is /tmp.
func testWorkdirNoWorkspace(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "pwd")
	req.Policy.Workspace = "none"
	res := s.runOK(t, req)
	if got := strings.TrimSpace(res.Stdout.Text); got != "/tmp" {
		t.Errorf("pwd with workspace none = %q, want %q", got, "/tmp")
	}
}

// testResultSandboxInfo: the result says which backend, policy, image and
// container ran the call, and which timeout applied.
func testResultSandboxInfo(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "true")
	res := s.runOK(t, req)
	p := req.Policy
	if res.Sandbox.Backend != string(p.Backend) || res.Sandbox.Policy != p.Name {
		t.Errorf("Result.Sandbox = %+v, want backend %q and policy %q", res.Sandbox, p.Backend, p.Name)
	}
	if res.TimeoutMs != callTimeoutMs {
		t.Errorf("Result.TimeoutMs = %d, want %d", res.TimeoutMs, callTimeoutMs)
	}
	if !s.cfg.Isolated {
		return
	}
	if res.Sandbox.ContainerID == "" {
		t.Errorf("Result.Sandbox.ContainerID is empty for an isolating backend")
	}
	if p.Image != "" && res.Sandbox.Image != p.Image {
		t.Errorf("Result.Sandbox.Image = %q, want the policy's %q", res.Sandbox.Image, p.Image)
	}
	if p.Runtime != "" && res.Sandbox.Runtime != string(p.Runtime) {
		t.Errorf("Result.Sandbox.Runtime = %q, want the policy's %q", res.Sandbox.Runtime, p.Runtime)
	}
	res2 := s.runOK(t, s.request(fx, "true"))
	if res2.Sandbox.ContainerID == res.Sandbox.ContainerID {
		t.Errorf("two calls share container id %q, want one container per call", res.Sandbox.ContainerID)
	}
}

// testTimeoutResolution: Result.TimeoutMs follows DESIGN §3.7: the
// request's value, else the policy's, else 120 s, clamped to the
// policy's maximum.
func testTimeoutResolution(t *testing.T, s *suite) {
	fx := newFixture(t)
	for _, tc := range []struct {
		req, def, max, want int64
	}{
		{req: 0, def: 0, max: 0, want: sandbox.DefaultTimeout.Milliseconds()},
		{req: 0, def: 7000, max: 0, want: 7000},
		{req: 90_000, def: 0, max: 5000, want: 5000},
		{req: 4000, def: 7000, max: 0, want: 4000},
	} {
		req := s.request(fx, "true")
		req.TimeoutMs = tc.req
		req.Policy.Limits.TimeoutMs = tc.def
		req.Policy.Limits.MaxTimeoutMs = tc.max
		res := s.runOK(t, req)
		if res.TimeoutMs != tc.want {
			t.Errorf("Result.TimeoutMs for request %d, policy default %d, max %d = %d, want %d", tc.req, tc.def, tc.max, res.TimeoutMs, tc.want)
		}
	}
}
