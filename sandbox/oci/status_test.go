package oci

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// waitStatus builds a wait status: an exit code, or a death by signal.
func waitStatus(code int, sig syscall.Signal) syscall.WaitStatus {
	if sig != 0 {
		return syscall.WaitStatus(uint32(sig))
	}
	return syscall.WaitStatus(uint32(code) << 8)
}

func TestDecodeStatusCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ws       syscall.WaitStatus
		wantCode int // -1: nil
		wantSig  string
	}{
		{"exit-0", waitStatus(0, 0), 0, ""},
		{"exit-1", waitStatus(1, 0), 1, ""},
		{"exit-128", waitStatus(128, 0), 128, ""},
		{"sigterm-folded", waitStatus(143, 0), -1, "SIGTERM"},
		{"sigkill-folded", waitStatus(137, 0), -1, "SIGKILL"},
		{"rtmax-folded", waitStatus(192, 0), -1, "SIGRTMAX"},
		{"above-signals", waitStatus(193, 0), 193, ""},
		{"exit-255", waitStatus(255, 0), 255, ""},
		{"unnamed-32", waitStatus(160, 0), -1, "SIG32"},
		{"runtime-killed", waitStatus(0, syscall.SIGKILL), -1, "SIGKILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, sig := decodeStatus(tc.ws)
			got := -1
			if code != nil {
				got = *code
			}
			if got != tc.wantCode || sig != tc.wantSig {
				t.Errorf("decodeStatus(%#x) = %d, %q, want %d, %q", uint32(tc.ws), got, sig, tc.wantCode, tc.wantSig)
			}
		})
	}
}

func TestInitScriptRestoresShellVars(t *testing.T) {
	env := []string{"A=1", "PATH=/bin:/usr/bin", "PWD=/it's here", "SHLVL=7"}
	s := initScript(env)
	for _, want := range []string{
		"unset OLDPWD; ", "unset _; ",
		"PATH='/bin:/usr/bin'; export PATH; ",
		`PWD='/it'\''s here'; export PWD; `,
		"SHLVL='7'; export SHLVL; ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("initScript(%q) = %q, want it to contain %q", env, s, want)
		}
	}
	if strings.Contains(s, "A=") {
		t.Errorf("initScript(%q) = %q: carries a value that is not shell-owned", env, s)
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
	for _, sh := range shells {
		run := func(command, stdin string) (string, string, int) {
			args := append(append([]string{}, sh[1:]...), initArgs("", command, env)[1:]...)
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
				t.Errorf("%v init running %q = %q, %q, %d, want %q, %q, %d", sh, tc.command, out, errs, code, tc.wantOut, tc.wantErr, tc.wantCode)
			}
		}
	}
}
