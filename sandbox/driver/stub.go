package driver

import (
	"fmt"
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// StubExit is the Exit of a call whose stub reported rep as the call's
// end: the command's wait status (Exited), the stub's own status when it
// could not start the command (Failed), or SIGKILL when the stub ended
// the call at its deadline (Expired).
func StubExit(rep stub.Report) (Exit, error) {
	switch rep.Kind {
	case stub.Exited:
		return WaitExit(syscall.WaitStatus(rep.Value), true), nil
	case stub.Failed:
		return Exit{Status: int(rep.Value), Init: true}, nil
	case stub.Expired:
		return Exit{Signal: syscall.SIGKILL}, nil
	}
	return Exit{}, fmt.Errorf("unexpected stub report %q", rep.Kind)
}
