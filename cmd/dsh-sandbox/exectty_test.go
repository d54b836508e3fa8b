package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestExecTTYRefusals: -t needs a terminal on stdin (the test's stdin is
// a byte reader) and goes with neither --stdin-file, --server nor
// --json; each is a usage error (exit 2) naming the reason, and nothing
// runs.
func TestExecTTYRefusals(t *testing.T) {
	dir := t.TempDir()
	global := []string{"--home", filepath.Join(dir, "home"), "--sessions-root", filepath.Join(dir, "sessions"),
		"--cwd", dir, "--state-dir", filepath.Join(dir, "state"), "--data-dir", filepath.Join(dir, "data")}
	tests := []struct {
		flags []string
		want  string
	}{
		{[]string{"-t"}, "the input device is not a terminal"},
		{[]string{"--tty", "-i"}, "the input device is not a terminal"},
		{[]string{"-t", "--stdin-file", "/dev/null"}, "not together with --stdin-file"},
		{[]string{"-t", "--json"}, "not together with --json"},
		{[]string{"-t", "--server", "unix:///nonexistent.sock"}, "not available with --server"},
	}
	for _, tt := range tests {
		args := append(append(append([]string{"exec"}, global...), tt.flags...), "--", "true")
		_, stderr, code := run(t, args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("exec %s = exit %d, %q; want 2 and %q", strings.Join(tt.flags, " "), code, stderr, tt.want)
		}
	}
}

func TestClientTerm(t *testing.T) {
	for in, want := range map[string]string{
		"xterm-256color": "xterm-256color", "screen.xterm": "screen.xterm", "dumb": "dumb",
		"": "xterm", "x\x1b]0;": "xterm", "a b": "xterm", strings.Repeat("x", 65): "xterm",
	} {
		if got := clientTerm(in); got != want {
			t.Errorf("clientTerm(%q) = %q, want %q", in, got, want)
		}
	}
}
