package api

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// firstListenFD is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const firstListenFD = 3

// maxListenFDs bounds LISTEN_FDS.
const maxListenFDs = 64

// InheritedListeners returns the listening sockets the service manager
// passed under the socket-activation protocol: LISTEN_PID is this
// process, LISTEN_FDS is their number, and they are descriptors 3, 4, ….
// It returns nil when the variables are absent or name another process
// (they were inherited by mistake). It unsets LISTEN_PID, LISTEN_FDS and
// LISTEN_FDNAMES, so that no child inherits them, and marks the
// descriptors close-on-exec. A descriptor that is not a listening stream
// socket is an error naming it.
func InheritedListeners() ([]net.Listener, error) {
	ls, err := inheritedListeners(os.Getenv, os.Getpid(), firstListenFD)
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(v)
	}
	return ls, err
}

func inheritedListeners(getenv func(string) string, pid, first int) ([]net.Listener, error) {
	pidVar, fdsVar := getenv("LISTEN_PID"), getenv("LISTEN_FDS")
	if pidVar == "" && fdsVar == "" {
		return nil, nil
	}
	p, err := strconv.Atoi(pidVar)
	if err != nil {
		return nil, fmt.Errorf("socket activation: LISTEN_PID %q is not a process id", pidVar)
	}
	if p != pid {
		return nil, nil
	}
	n, err := strconv.Atoi(fdsVar)
	if err != nil || n < 0 || n > maxListenFDs {
		return nil, fmt.Errorf("socket activation: LISTEN_FDS %q is not a count from 0 to %d", fdsVar, maxListenFDs)
	}
	names := strings.Split(getenv("LISTEN_FDNAMES"), ":")
	var out []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, l := range out {
			l.Close()
		}
		return nil, err
	}
	for i := range n {
		fd := first + i
		name := "fd " + strconv.Itoa(fd)
		if i < len(names) && names[i] != "" {
			name += " (" + names[i] + ")"
		}
		syscall.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), name)
		if f == nil {
			return fail(fmt.Errorf("socket activation: %s is not open", name))
		}
		l, err := net.FileListener(f) // a duplicate; f is closed below
		f.Close()
		if err != nil {
			return fail(fmt.Errorf("socket activation: %s is not a listening socket: %v", name, err))
		}
		switch l.(type) {
		case *net.UnixListener, *net.TCPListener:
		default:
			l.Close()
			return fail(fmt.Errorf("socket activation: %s is a %s socket; want a unix or tcp stream socket", name, l.Addr().Network()))
		}
		out = append(out, l)
	}
	return out, nil
}

// ListenerAddress is the listen address of l in the form ParseListen
// reads: unix:///PATH or tcp://HOST:PORT.
func ListenerAddress(l net.Listener) string {
	if ul, ok := l.(*net.UnixListener); ok {
		return "unix://" + ul.Addr().String()
	}
	return "tcp://" + l.Addr().String()
}

// CheckInheritedTCP refuses an inherited TCP listener on a non-loopback
// address unless remote clients are allowed, as ListenTCP does.
func CheckInheritedTCP(l net.Listener, allowRemote bool) error {
	host, _, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		return fmt.Errorf("inherited tcp listener %s: %v", l.Addr(), err)
	}
	if !allowRemote && !isLoopback(host) {
		return fmt.Errorf("inherited tcp listener %s is not loopback: refusing without allowing remote clients explicitly", l.Addr())
	}
	return nil
}
