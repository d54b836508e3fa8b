// Package console holds the host side of a call on a terminal (exec -t):
// a pseudo-terminal pair opened on the host, the relay between it and the
// user's streams, and the raw mode and window size of the user's own
// terminal. The oci backend gives the slave to the runtime, which puts
// the container's terminal behind it; the CLI sets its terminal raw.
//
// It imports the sandbox package, creack/pty and moby/term; backends and
// the CLI import it, nothing under sandbox/ but those.
package console

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/creack/pty"
	"github.com/moby/term"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Pair is a pseudo-terminal opened on the host: Master stays with the
// caller, Slave is handed to the process that runs on it. The fields are
// never changed; its methods are safe for concurrent use, also with
// Close (a method on a closed end returns an error).
type Pair struct {
	Master, Slave *os.File
}

// Open opens a pair whose window is size (a zero dimension: the default,
// sandbox.WindowSize.OrDefault).
// With raw, the slave is put in raw mode: no echo, no line editing, no
// signal keys, no output processing, so that a terminal behind it (the
// runtime's copy of the container's own) sees every byte unchanged.
func Open(size sandbox.WindowSize, raw bool) (*Pair, error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	// pty.Open leaves the master blocking, where Close cannot interrupt
	// a Read: a non-blocking copy goes through the runtime poller.
	pm, err := pollable(m)
	m.Close()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	p := &Pair{Master: pm, Slave: s}
	if err := p.Resize(size); err != nil {
		p.Close()
		return nil, err
	}
	if raw {
		if _, err := term.MakeRaw(s.Fd()); err != nil {
			p.Close()
			return nil, fmt.Errorf("raw mode on %s: %w", s.Name(), err)
		}
	}
	return p, nil
}

// Resize sets the window size (size.OrDefault()); the kernel
// sends SIGWINCH to the foreground process group of a session the slave
// controls.
func (p *Pair) Resize(size sandbox.WindowSize) error {
	size = size.OrDefault()
	sc, err := p.Master.SyscallConn()
	if err == nil {
		cerr := sc.Control(func(fd uintptr) {
			err = term.SetWinsize(fd, &term.Winsize{Height: size.Rows, Width: size.Cols})
		})
		err = cmp.Or(cerr, err)
	}
	if err != nil {
		return fmt.Errorf("window size of the terminal: %w", err)
	}
	return nil
}

// pollable returns a non-blocking duplicate of f that the runtime
// poller serves.
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// CloseSlave closes the slave once the process that runs on it has its
// own copy: the master then reads EOF (EIO) when that process and its
// children have closed theirs.
// It may run more than once.
func (p *Pair) CloseSlave() {
	if p.Slave != nil {
		_ = p.Slave.Close() // a second Close only says it was closed
	}
}

// Close closes both ends; a blocked Relay returns. It may run more than
// once.
func (p *Pair) Close() {
	p.CloseSlave()
	if p.Master != nil {
		_ = p.Master.Close()
	}
}

// Relay copies in (when not nil) to the master and the master to out,
// each on its own goroutine, and returns a channel closed when the
// output has ended: every holder of the slave closed it, or Close was
// called. The input copy stops at in's EOF or at the first failed write
// (the pair closed); a Read of in still blocked then is left to the
// caller, as Request.StdinReader documents.
func (p *Pair) Relay(in io.Reader, out io.Writer) <-chan struct{} {
	m := p.Master
	if in != nil {
		go func() { _, _ = io.Copy(m, in) }()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, m) // EIO once the slave has no holder left
	}()
	return done
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(f.Fd()) }

// Size returns the window size of the terminal f.
func Size(f *os.File) (sandbox.WindowSize, error) {
	ws, err := term.GetWinsize(f.Fd())
	if err != nil {
		return sandbox.WindowSize{}, fmt.Errorf("window size of %s: %w", f.Name(), err)
	}
	return sandbox.WindowSize{Rows: ws.Height, Cols: ws.Width}, nil
}

// MakeRaw puts the terminal f in raw mode and returns the function that
// restores its previous mode; restore is idempotent and safe for
// concurrent use (a signal handler and a deferred call may both run it).
func MakeRaw(f *os.File) (restore func() error, err error) {
	if !IsTerminal(f) {
		return nil, errors.New("not a terminal")
	}
	st, err := term.MakeRaw(f.Fd())
	if err != nil {
		return nil, fmt.Errorf("raw mode on %s: %w", f.Name(), err)
	}
	var once sync.Once
	return func() error {
		var rerr error
		once.Do(func() { rerr = term.RestoreTerminal(f.Fd(), st) })
		return rerr
	}, nil
}

// ReceiveMaster accepts one connection on ln, the console socket a
// runtime was given (--console-socket), and returns the pseudo-terminal
// master the runtime sends over it (SCM_RIGHTS) as a Pair without a
// slave. Closing ln makes it return. Any other descriptor sent along is
// closed.
func ReceiveMaster(ln *net.UnixListener) (*Pair, error) {
	conn, err := ln.AcceptUnix()
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	defer conn.Close()
	buf := make([]byte, 4096) // the runtime sends the terminal's name
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return nil, errors.New("console socket: the runtime sent no terminal")
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	f := os.NewFile(uintptr(fds[0]), "pty-master")
	defer f.Close()
	m, err := pollable(f)
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	return &Pair{Master: m}, nil
}
