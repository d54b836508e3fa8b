package render

import (
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestRenderOOM: an out-of-memory kill is named on the signal line, or
// on a line of its own when the command survived it; the same result
// without the kill renders as before.
func TestRenderOOM(t *testing.T) {
	for _, tt := range []struct {
		name string
		res  sandbox.Result
		want string
	}{
		{"killed", sandbox.Result{Signal: "SIGKILL", OOMKilled: true, Stdout: sandbox.Stream{Text: "allocating\n"}},
			"allocating\n[killed by signal: SIGKILL (out of memory)]"},
		{"killed-not-oom", sandbox.Result{Signal: "SIGKILL", Stdout: sandbox.Stream{Text: "allocating\n"}},
			"allocating\n[killed by signal: SIGKILL]"},
		{"survived", sandbox.Result{ExitCode: exit(1), OOMKilled: true, Stderr: sandbox.Stream{Text: "Killed\n"}},
			"[stderr]\nKilled\n[out of memory: a process of the command was killed]\n[exit code: 1]"},
		{"survived-exit-0", sandbox.Result{ExitCode: exit(0), OOMKilled: true},
			"(no output)\n[out of memory: a process of the command was killed]"},
		{"timed-out", sandbox.Result{TimedOut: true, TimeoutMs: 500, Signal: "SIGKILL", OOMKilled: true},
			"(no output)\n[timed out after 500ms]\n[killed by signal: SIGKILL (out of memory)]"},
	} {
		if got := Result(&tt.res); got != tt.want {
			t.Errorf("%s: Result(%+v) = %q, want %q", tt.name, tt.res, got, tt.want)
		}
	}
}
