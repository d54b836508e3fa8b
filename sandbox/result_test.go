package sandbox

import (
	"syscall"
	"testing"
)

func TestStoppedByCases(t *testing.T) {
	three := 3
	for _, tc := range []struct {
		name       string
		res        Result
		sig        syscall.Signal
		wantCode   int // -1: nil
		wantSignal string
	}{
		{"finished-alone", Result{ExitCode: &three}, syscall.SIGTERM, 3, ""},
		{"timeout-own-status", Result{ExitCode: &three, TimedOut: true}, syscall.SIGTERM, -1, "SIGTERM"},
		{"aborted-own-status", Result{ExitCode: &three, Aborted: true}, syscall.SIGKILL, -1, "SIGKILL"},
		{"timeout-signalled", Result{Signal: "SIGKILL", TimedOut: true}, syscall.SIGTERM, -1, "SIGKILL"},
		{"timeout-no-signal-sent", Result{ExitCode: &three, TimedOut: true}, 0, 3, ""},
	} {
		r := tc.res
		r.StoppedBy(tc.sig)
		got := -1
		if r.ExitCode != nil {
			got = *r.ExitCode
		}
		if got != tc.wantCode || r.Signal != tc.wantSignal {
			t.Errorf("%s: StoppedBy(%v) = %d, %q, want %d, %q", tc.name, tc.sig, got, r.Signal, tc.wantCode, tc.wantSignal)
		}
	}
}
