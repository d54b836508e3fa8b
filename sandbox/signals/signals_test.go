package signals

import (
	"syscall"
	"testing"
)

func TestSignalName(t *testing.T) {
	tests := []struct {
		n    syscall.Signal
		want string
	}{
		{0, ""},
		{-1, ""},
		{1, "SIGHUP"},
		{9, "SIGKILL"},
		{15, "SIGTERM"},
		{31, "SIGSYS"},
		{32, "SIG32"},
		{33, "SIG33"},
		{34, "SIGRTMIN"},
		{35, "SIGRTMIN+1"},
		{49, "SIGRTMIN+15"},
		{50, "SIGRTMAX-14"},
		{63, "SIGRTMAX-1"},
		{64, "SIGRTMAX"},
		{65, ""},
	}
	for _, tt := range tests {
		if got := Name(tt.n); got != tt.want {
			t.Errorf("Name(%d) = %q, want %q", int(tt.n), got, tt.want)
		}
	}
}

func TestSignalNumber(t *testing.T) {
	tests := []struct {
		name   string
		want   syscall.Signal
		wantOK bool
	}{
		{"SIGKILL", 9, true},
		{"KILL", 9, true},
		{"sigterm", 15, true},
		{"SIG32", 32, true},
		{"SIGRTMIN", 34, true},
		{"SIGRTMIN+3", 37, true},
		{"SIGRTMAX-2", 62, true},
		{"SIGRTMAX", 64, true},
		{"", 0, false},
		{"SIG", 0, false},
		{"SIGFOO", 0, false},
		{"SIG0", 0, false},
		{"SIG65", 0, false},
		{"SIG+9", 0, false},
		{"SIGRTMIN+31", 0, false},
		{"SIGRTMIN+-1", 0, false},
		{"SIGRTMAX-31", 0, false},
		{"SIGRTMIN+", 0, false},
	}
	for _, tt := range tests {
		got, ok := Number(tt.name)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Number(%q) = %d, %v, want %d, %v", tt.name, int(got), ok, int(tt.want), tt.wantOK)
		}
	}
	for n := syscall.Signal(1); n <= 64; n++ {
		if got, ok := Number(Name(n)); got != n || !ok {
			t.Errorf("Number(Name(%d)) = %d, %v, want %d, true", int(n), int(got), ok, int(n))
		}
	}
}
