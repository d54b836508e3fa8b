package process

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestDecodeExitStatusCases(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   int // -1: nil
		signal string
	}{
		{0, 0, ""},
		{1, 1, ""},
		{42, 42, ""},
		{128, 128, ""},
		{137, -1, "SIGKILL"},
		{143, -1, "SIGTERM"},
		{255, 255, ""},
	} {
		code, sig := DecodeExitStatus(tc.status)
		got := -1
		if code != nil {
			got = *code
		}
		if got != tc.code || sig != tc.signal {
			t.Errorf("DecodeExitStatus(%d) = %d, %q, want %d, %q", tc.status, got, sig, tc.code, tc.signal)
		}
	}
}

func TestInitScriptCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want []string
		not  []string
	}{
		{"unset-missing", []string{"A=1"}, []string{"unset HOSTNAME;", "unset HOME;", "unset PATH;"}, []string{"A=1"}},
		{"restore-owned", []string{"PATH=/bin", "HOME=/tmp"}, []string{"PATH='/bin'; export PATH;", "HOME='/tmp'; export HOME;"}, nil},
		{"quote", []string{"PWD=/it's"}, []string{`PWD='/it'\''s'`}, nil},
		{"secret-not-in-argv", []string{"DSH_SESSION_ID=s1", "TOKENISH=x"}, nil, []string{"s1", "TOKENISH"}},
	} {
		got := initScript(tc.env)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("initScript(%q) = %q, want it to contain %q", tc.env, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("initScript(%q) = %q, want no %q", tc.env, got, n)
			}
		}
	}
	args := InitArgs(&sandbox.Request{Command: "echo hi"}, nil)
	if !slices.Equal(args[:2], []string{"/bin/sh", "-c"}) || args[3] != "sh" || args[4] != "echo hi" {
		t.Errorf("InitArgs(%q, nil) = %q, want /bin/sh -c SCRIPT sh %q", "echo hi", args, "echo hi")
	}
}

// TestInitShellRuns runs the init under the host's /bin/sh (dash here)
// and busybox sh, as a container would, and checks what the command
// sees: exactly its environment, its stdin, its stderr, its signals and
// its exit status.
func TestInitShellRuns(t *testing.T) {
	shells := [][]string{{"/bin/sh"}}
	if p, err := exec.LookPath("busybox"); err == nil {
		shells = append(shells, []string{p, "sh"})
	}
	env := []string{"A=1", "B=two words"}
	inits := map[string]func(command string) []string{
		"InitArgsWithShell": func(command string) []string { return InitArgsWithShell("", &sandbox.Request{Command: command}, env) },
		"InitArgs":          func(command string) []string { return InitArgs(&sandbox.Request{Command: command}, env) },
	}
	for name, initArgs := range inits {
		for _, sh := range shells {
			run := func(command, stdin string) (string, string, int) {
				args := append(append([]string{}, sh[1:]...), initArgs(command)[1:]...)
				cmd := exec.Command(sh[0], args...)
				cmd.Env = env
				cmd.Stdin = strings.NewReader(stdin)
				var out, errb strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &errb
				err := cmd.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatalf("%v: %v", sh, err)
				}
				return out.String(), errb.String(), code
			}
			for _, tc := range []struct {
				command, stdin   string
				wantOut, wantErr string
				wantCode         int
			}{
				{"cat /proc/$$/environ | tr '\\0' '\\n' | sort", "", "A=1\nB=two words\n", "", 0},
				{"cat; echo err >&2; exit 3", "in\n", "in\n", "err\n", 3},
				{"kill -TERM $$", "", "", "", 143},
				{"kill -INT $$", "", "", "", 130},
				{"test -e /proc/$$/fd/3 && echo fd3-open || echo fd3-closed", "", "fd3-closed\n", "", 0},
			} {
				out, errs, code := run(tc.command, tc.stdin)
				if out != tc.wantOut || errs != tc.wantErr || code != tc.wantCode {
					t.Errorf("%s under %v running %q = %q, %q, %d, want %q, %q, %d", name, sh, tc.command, out, errs, code, tc.wantOut, tc.wantErr, tc.wantCode)
				}
			}
		}
	}
}
