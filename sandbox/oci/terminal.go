package oci

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/console"
)

// terminalDrain is how long the output of a call on a terminal may go on
// after the runtime exited before the relay is cut; it also bounds the
// wait for a runtime's console socket connection after it exited.
const terminalDrain = 2 * time.Second

// callTerminal is the host end of a call that runs on a terminal inside
// its container (Request.Terminal). The spec has process.terminal, so
// the runtime opens the container's terminal; how its master reaches us
// depends on the runtime:
//
//   - runc, in the foreground, refuses --console-socket: it copies
//     between the container's terminal and its own stdio and follows its
//     own terminal's size on SIGWINCH. Its stdio is a raw host
//     pseudo-terminal of ours (pair), whose master we relay.
//   - crun sends the container's master over --console-socket even in
//     the foreground (and does not follow SIGWINCH on its own terminal):
//     we receive it on ln and relay and resize it directly.
//
// runsc is refused (terminalCapable): gVisor gives the command the host
// terminal's descriptor rather than a /dev/pts of its own, and an
// interactive bash on it reads end-of-file at once.
//
// Create one with openTerminal before the runtime starts, start it once
// the runtime has, and finish it after the runtime exited.
type callTerminal struct {
	t     *sandbox.Terminal
	ln    *net.UnixListener // crun: the console socket
	dir   string            // the console socket's directory
	ended chan struct{}     // closed when the output has ended
	got   chan struct{}     // crun: closed when the master came, or will not

	mu     sync.Mutex
	pair   *console.Pair // runc: the runtime's stdio; else the received master
	closed bool
}

// terminalCapable reports whether calls on runtime may have a terminal.
func terminalCapable(runtime string) bool {
	return runtime == RuntimeRunc || runtime == RuntimeCrun
}

// openTerminal prepares cmd, the runtime's foreground run, for a call on
// a terminal. On error nothing is left to close.
func openTerminal(cmd *exec.Cmd, runtime string, t *sandbox.Terminal) (*callTerminal, error) {
	ct := &callTerminal{t: t, ended: make(chan struct{})}
	if runtime == RuntimeRunc {
		p, err := console.Open(t.Size, true)
		if err != nil {
			return nil, err
		}
		ct.pair = p
		cmd.Stdin, cmd.Stdout, cmd.Stderr = p.Slave, p.Slave, p.Slave
		return ct, nil
	}
	// A short path: a socket's path is at most 107 bytes, and the state
	// directory may be deep.
	dir, err := os.MkdirTemp("", "dsh-sandbox-tty-")
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	path := filepath.Join(dir, "console.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("console socket: %w", err)
	}
	ct.ln, ct.dir = ln, dir
	// "run [flags] ID": the flag goes before the container id.
	cmd.Args = slices.Insert(cmd.Args, len(cmd.Args)-1, "--console-socket", path)
	return ct, nil
}

// start starts the relay once the runtime has started: the request's
// stdin into the terminal, its output into out (the stdout capture), and
// the request's resizes until done (the runtime's exit) closes.
func (ct *callTerminal) start(cmd *exec.Cmd, req *sandbox.Request, out io.Writer, done <-chan struct{}) {
	if ct.pair != nil { // runc
		ct.pair.CloseSlave() // the runtime has its own copy
		ct.relay(ct.pair, req.StdinSource(), out)
		go ct.t.KeepSize(context.Background(), done, func(_ context.Context, s sandbox.WindowSize) error {
			if err := ct.pair.Resize(s); err != nil {
				return err
			}
			return cmd.Process.Signal(syscall.SIGWINCH)
		})
		return
	}
	ct.got = make(chan struct{})
	go func() {
		p, err := console.ReceiveMaster(ct.ln)
		ct.mu.Lock()
		if err == nil && ct.closed {
			p.Close()
			err = net.ErrClosed
		}
		if err == nil {
			ct.pair = p
		}
		ct.mu.Unlock()
		close(ct.got)
		if err != nil {
			close(ct.ended) // the runtime failed before it sent one
			return
		}
		ct.relay(p, req.StdinSource(), out)
		ct.t.KeepSize(context.Background(), done, func(_ context.Context, s sandbox.WindowSize) error {
			return p.Resize(s)
		})
	}()
}

// relay copies between p's master and the call's streams and closes
// ct.ended when the output has ended.
func (ct *callTerminal) relay(p *console.Pair, in io.Reader, out io.Writer) {
	ended := p.Relay(in, out)
	go func() {
		<-ended
		close(ct.ended)
	}()
}

// finish waits, once the runtime exited, for the output to end (at most
// terminalDrain), then closes everything.
func (ct *callTerminal) finish(log *slog.Logger) {
	t := time.NewTimer(terminalDrain)
	defer t.Stop()
	if ct.got != nil {
		select {
		case <-ct.got:
		case <-t.C:
			log.Warn("the runtime exited without sending its terminal")
			ct.ln.Close() // ReceiveMaster returns
			<-ct.got
		}
	}
	select {
	case <-ct.ended:
	case <-t.C:
		log.Warn("terminal output did not end after the runtime exited; closing it")
	}
	ct.close()
	<-ct.ended
}

// close releases the terminal, the console socket and its directory. A
// blocked relay returns. It may run more than once.
func (ct *callTerminal) close() {
	ct.mu.Lock()
	ct.closed = true
	p := ct.pair
	ct.mu.Unlock()
	if p != nil {
		p.Close()
	}
	if ct.ln != nil {
		ct.ln.Close()
		os.RemoveAll(ct.dir)
	}
}
