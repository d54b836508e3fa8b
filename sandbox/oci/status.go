package oci

import (
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// decodeStatus turns the wait status of the runtime's `run` process into
// the call's exit code or signal.
//
// runc, crun and runsc all exit with the container's status, and the init
// shell exits with its child's: an exit code as is, a death by signal N as
// 128+N. A status 129–192 naming a known signal is therefore reported as
// that signal, with a nil exit code — which is also how a command that
// itself ends with `exit 137` is reported: the two are indistinguishable
// at the runtime boundary, exactly as they are in a shell's $?. A
// runtime process killed by a signal itself (the backend kills it only
// when the container never appeared) is reported as that signal.
func decodeStatus(ws syscall.WaitStatus) (code *int, signal string) {
	if ws.Signaled() {
		return nil, sandbox.SignalName(ws.Signal())
	}
	return sandbox.DecodeExitStatus(ws.ExitStatus())
}
