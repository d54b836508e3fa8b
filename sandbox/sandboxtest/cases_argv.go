package sandboxtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// argvCases check Request.Argv: the words run exactly as given, with no
// shell parsing them, on every backend.
func argvCases() []testCase {
	return []testCase{
		{name: "argv-exact", run: testArgvExact},
		{name: "argv-exit-code", run: testArgvExitCode},
	}
}

// argvRequest is s.request with argv instead of a command.
func (s *suite) argvRequest(fx *fixture, argv ...string) *sandbox.Request {
	req := s.request(fx, "")
	req.Argv = argv
	return req
}

// testArgvExact: `printf '%s\n' 'c;d' '$HOME' '*'` as an argv prints its
// words literally: a shell joining them would run `d`, expand $HOME and
// glob the workspace (which holds a file).
func testArgvExact(t *testing.T, s *suite) {
	fx := newFixture(t)
	if err := os.WriteFile(filepath.Join(fx.Workspace, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	req := s.argvRequest(fx, "printf", `%s\n`, "c;d", "$HOME", "*")
	res := s.run(t, req)
	wantExit(t, req, res, 0)
	if want := "c;d\n$HOME\n*\n"; res.Stdout.Text != want || res.Stderr.Text != "" {
		t.Errorf("Run(argv %q) = stdout %q, stderr %q; want stdout %q and no stderr", req.Argv, res.Stdout.Text, res.Stderr.Text, want)
	}
}

// testArgvExitCode: an argv's program gives the call its exit status; a
// program that is not found is 127, as in a shell.
func testArgvExitCode(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.argvRequest(fx, "false")
	wantExit(t, req, s.run(t, req), 1)
	req = s.argvRequest(fx, "no-such-program-dsh-sandbox")
	wantExit(t, req, s.run(t, req), 127)
}
