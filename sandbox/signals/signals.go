package signals

import (
	"strconv"
	"strings"
	"syscall"
)

// linuxSignals are the names of Linux signals 1–31, indexed by number.
// Containers always run on a Linux kernel, so Result.Signal uses Linux
// numbering whatever the host of the caller.
var linuxSignals = [...]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP",
	6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1",
	11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP",
	21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ",
	26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR",
	31: "SIGSYS",
}

// Real-time signal numbers as user space sees them (glibc reserves 32
// and 33 for itself).
const (
	sigRTMin = 34
	sigRTMax = 64
)

// Name returns the name of Linux signal n as Result.Signal spells
// it: "SIGKILL", "SIGRTMIN+3", "SIGRTMAX-2" (bash's `kill -l` spelling),
// or "SIG<n>" for a number without a name. It returns "" for n ≤ 0 or
// n > 64.
func Name(n syscall.Signal) string {
	switch {
	case n <= 0 || n > sigRTMax:
		return ""
	case int(n) < len(linuxSignals):
		return linuxSignals[n]
	case n < sigRTMin:
		return "SIG" + strconv.Itoa(int(n))
	case n == sigRTMin:
		return "SIGRTMIN"
	case n == sigRTMax:
		return "SIGRTMAX"
	case n-sigRTMin <= 15:
		return "SIGRTMIN+" + strconv.Itoa(int(n-sigRTMin))
	}
	return "SIGRTMAX-" + strconv.Itoa(int(sigRTMax-n))
}

// Number is the inverse of Name: it returns the Linux number
// of a signal name, with or without the "SIG" prefix, in any case. ok is
// false for a name it does not know.
func Number(name string) (n syscall.Signal, ok bool) {
	s := strings.ToUpper(name)
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	for i, v := range linuxSignals {
		if v != "" && v == s {
			return syscall.Signal(i), true
		}
	}
	rest := strings.TrimPrefix(s, "SIG")
	if d, err := strconv.Atoi(rest); err == nil && rest[0] != '+' && rest[0] != '-' {
		if d > 0 && d <= sigRTMax {
			return syscall.Signal(d), true
		}
		return 0, false
	}
	base, sign, off := sigRTMin, 1, "0"
	switch {
	case rest == "RTMIN", rest == "RTMAX":
		if rest == "RTMAX" {
			base = sigRTMax
		}
	case strings.HasPrefix(rest, "RTMIN+"):
		off = rest[len("RTMIN+"):]
	case strings.HasPrefix(rest, "RTMAX-"):
		base, sign, off = sigRTMax, -1, rest[len("RTMAX-"):]
	default:
		return 0, false
	}
	d, err := strconv.Atoi(off)
	if err != nil || d < 0 || off[0] == '+' || off[0] == '-' {
		return 0, false
	}
	v := base + sign*d
	if v < sigRTMin || v > sigRTMax {
		return 0, false
	}
	return syscall.Signal(v), true
}
