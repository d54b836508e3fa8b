package prepare

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/process"
)

func TestPrepareArgvCase(t *testing.T) {
	tests := []struct {
		name    string
		command string
		argv    []string
		mention string // "" for a valid request
	}{
		{"argv", "", []string{"printf", "%s\n", "c;d"}, ""},
		{"argv with empty later words", "", []string{"printf", ""}, ""},
		{"command", "echo a; echo b", nil, ""},
		{"both", "echo a", []string{"echo", "b"}, "command and argv are both set"},
		{"empty argv", "", []string{}, "argv[0] is empty"},
		{"empty first word", "", []string{"", "x"}, "argv[0] is empty"},
		{"NUL", "", []string{"echo", "a\x00b"}, "argv[1] contains a NUL byte"},
		{"NUL in the first word", "", []string{"ec\x00ho"}, "argv[0] contains a NUL byte"},
	}
	for _, tt := range tests {
		req := calls.Request()
		req.Command, req.Argv = tt.command, tt.argv
		_, err := Call(req, nil, nil, nil)
		switch {
		case tt.mention == "" && err != nil:
			t.Errorf("%s: Call(command %q, argv %q) = %v, want it valid", tt.name, tt.command, tt.argv, err)
		case tt.mention != "" && (!errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.mention)):
			t.Errorf("%s: Call(command %q, argv %q) = %v, want an invalid-argument error naming %q", tt.name, tt.command, tt.argv, err, tt.mention)
		}
	}
	// The other checks still run when argv is set.
	req := calls.Request()
	req.Command, req.Argv, req.TimeoutMs = "", []string{"true"}, -1
	if _, err := Call(req, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "timeoutMs") {
		t.Errorf("Call(argv, timeoutMs -1) = %v, want an error naming timeoutMs", err)
	}
}

// TestInitArgvRuns runs the init with an argv under the host's /bin/sh
// and busybox sh, as a container would: the words reach the program
// exactly, with no shell parsing them.
func TestInitArgvRuns(t *testing.T) {
	shells := [][]string{{"/bin/sh"}}
	if p, err := exec.LookPath("busybox"); err == nil {
		shells = append(shells, []string{p, "sh"})
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}
	argv := []string{"printf", `%s\n`, "c;d", "$HOME", "*", "a b", "'q'", "$(id)"}
	want := "c;d\n$HOME\n*\na b\n'q'\n$(id)\n"
	for name, args := range map[string][]string{
		"InitArgs":          process.InitArgs(&sandbox.Request{Argv: argv}, env),
		"InitArgsWithShell": process.InitArgsWithShell("/bin/bash", &sandbox.Request{Argv: argv}, env),
	} {
		if !slices.Equal(args[len(args)-len(argv):], argv) {
			t.Errorf("%s(argv %q) = %q, want the argv last and unchanged", name, argv, args)
		}
		for _, sh := range shells {
			cmd := exec.Command(sh[0], append(append([]string{}, sh[1:]...), args[1:]...)...)
			cmd.Env = env
			cmd.Dir = t.TempDir() // a "*" that a shell expanded would show "file"
			if err := os.WriteFile(filepath.Join(cmd.Dir, "file"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != want {
				t.Errorf("%s under %v = %q, %v; want %q", name, sh, out, err, want)
			}
		}
	}
	// One command string still runs through a shell.
	cmd := exec.Command("/bin/sh", process.InitArgs(&sandbox.Request{Command: "echo a; echo b"}, env)[1:]...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "a\nb\n" {
		t.Errorf("InitArgs(command %q) = %q, %v; want %q", "echo a; echo b", out, err, "a\nb\n")
	}
}
