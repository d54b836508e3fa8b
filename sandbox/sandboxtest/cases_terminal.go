package sandboxtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// terminalCases check calls on a terminal (Request.Terminal, exec -t):
// a backend either runs the command on a terminal of the asked size, its
// output one stream in stdout, or refuses the call before anything runs;
// it never runs it without one. A policy with DenyTTY refuses it
// everywhere.
func terminalCases() []testCase {
	return []testCase{
		{name: "terminal", run: testTerminal},
		{name: "terminal-refused-by-policy", run: invalidCase(func(r *sandbox.Request) {
			r.Terminal = &sandbox.Terminal{}
			r.Policy.DenyTTY = true
		}, "terminal", "")},
	}
}

// terminalSize prints the terminal's size once it is not 0×0, waiting up
// to 5 s: an engine older than API 1.42 (Docker 20.10) ignores the size
// at create, so the backend can set it only once the container runs.
const terminalSize = `i=0; while [ $i -lt 100 ]; do s=$( (stty size || busybox stty size) 2>/dev/null); ` +
	`case "$s" in "" | "0 0") ;; *) break ;; esac; i=$((i+1)); sleep 0.05; done; echo "$s"`

// testTerminal: on a terminal of 31×97, stdin, stdout and stderr are
// terminals (a /dev/pts one), stty reports the size and what goes to
// stderr arrives in stdout; or the backend refuses with ErrInvalid naming
// the terminal, and nothing ran.
func testTerminal(t *testing.T, s *suite) {
	fx := newFixture(t)
	ran := filepath.Join(fx.Workspace, "ran")
	req := s.request(fx, "touch "+shellQuote(ran)+"; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo on-a-terminal; "+
		"readlink /proc/self/fd/0; "+terminalSize+"; echo to-stderr >&2")
	req.Terminal = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: 31, Cols: 97}}
	req.StdinReader = strings.NewReader("") // ends at once: the terminal stays
	res, err := s.runCtx(t.Context(), req)
	if err != nil {
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "terminal") {
			t.Fatalf("Run(on a terminal) error = %v, want nil or an ErrInvalid refusal naming the terminal", err)
		}
		if _, serr := os.Lstat(ran); serr == nil {
			t.Errorf("Run(on a terminal) refused the call (%v), but the command ran", err)
		}
		t.Logf("this backend refuses calls on a terminal: %v", err)
		return
	}
	wantExit(t, req, res, 0)
	out := res.Stdout.Text
	for _, want := range []string{"on-a-terminal", "/dev/pts/", "31 97", "to-stderr"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout on a terminal = %q, want it to hold %q", out, want)
		}
	}
	if res.Stderr.Text != "" {
		t.Errorf("stderr on a terminal = %q, want empty (the terminal is one stream)", res.Stderr.Text)
	}
}
