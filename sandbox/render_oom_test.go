package sandbox

import "testing"

// TestRenderOOM: an out-of-memory kill is named on the signal line, or
// on a line of its own when the command survived it; the same result
// without the kill renders as before.
func TestRenderOOM(t *testing.T) {
	for _, tt := range []struct {
		name string
		res  Result
		want string
	}{
		{"killed", Result{Signal: "SIGKILL", OOMKilled: true, Stdout: Stream{Text: "allocating\n"}},
			"allocating\n[killed by signal: SIGKILL (out of memory)]"},
		{"killed-not-oom", Result{Signal: "SIGKILL", Stdout: Stream{Text: "allocating\n"}},
			"allocating\n[killed by signal: SIGKILL]"},
		{"survived", Result{ExitCode: exit(1), OOMKilled: true, Stderr: Stream{Text: "Killed\n"}},
			"[stderr]\nKilled\n[out of memory: a process of the command was killed]\n[exit code: 1]"},
		{"survived-exit-0", Result{ExitCode: exit(0), OOMKilled: true},
			"(no output)\n[out of memory: a process of the command was killed]"},
		{"timed-out", Result{TimedOut: true, TimeoutMs: 500, Signal: "SIGKILL", OOMKilled: true},
			"(no output)\n[timed out after 500ms]\n[killed by signal: SIGKILL (out of memory)]"},
	} {
		if got := Render(&tt.res); got != tt.want {
			t.Errorf("%s: Render(%+v) = %q, want %q", tt.name, tt.res, got, tt.want)
		}
	}
}
