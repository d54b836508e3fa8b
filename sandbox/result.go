package sandbox

import (
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals"
)

// StoppedBy settles the outcome of a call that process.Supervise stopped with
// sig (the last signal it sent): when r.TimedOut or r.Aborted is set and
// r names no signal, the command chose its own exit status after being
// told to stop (a TERM handler); it still did not finish on its own, so
// r reports sig and no exit code. Otherwise, or when sig is 0, r is left
// as it is. Set r.TimedOut and r.Aborted first.
func (r *Result) StoppedBy(sig syscall.Signal) {
	if (r.TimedOut || r.Aborted) && r.Signal == "" && sig != 0 {
		r.ExitCode, r.Signal = nil, signals.Name(sig)
	}
}
