package driver

import (
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

func TestWaitExitDecodeCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ws       syscall.WaitStatus
		init     bool
		wantCode int // -1: nil
		wantSig  string
	}{
		{"exit-0", waitStatus(0, 0), true, 0, ""},
		{"exit-1", waitStatus(1, 0), true, 1, ""},
		{"exit-128", waitStatus(128, 0), true, 128, ""},
		{"sigterm-folded", waitStatus(143, 0), true, -1, "SIGTERM"},
		{"sigkill-folded", waitStatus(137, 0), true, -1, "SIGKILL"},
		{"rtmax-folded", waitStatus(192, 0), true, -1, "SIGRTMAX"},
		{"above-signals", waitStatus(193, 0), true, 193, ""},
		{"exit-255", waitStatus(255, 0), true, 255, ""},
		{"unnamed-32", waitStatus(160, 0), true, -1, "SIG32"},
		{"runtime-killed", waitStatus(0, syscall.SIGKILL), true, -1, "SIGKILL"},
		{"host-137-as-is", waitStatus(137, 0), false, 137, ""},
		{"host-killed", waitStatus(0, syscall.SIGTERM), false, -1, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, sig := WaitExit(tc.ws, tc.init).decode()
			got := -1
			if code != nil {
				got = *code
			}
			if got != tc.wantCode || sig != tc.wantSig {
				t.Errorf("WaitExit(%#x, %v).decode() = %d, %q, want %d, %q", uint32(tc.ws), tc.init, got, sig, tc.wantCode, tc.wantSig)
			}
		})
	}
}
