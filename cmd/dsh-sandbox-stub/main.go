// Command dsh-sandbox-stub is pid 1 of every container the oci backend
// prepares (package sandbox/stub has the protocol). It runs with an empty
// environment and the call's identity, makes itself undumpable (so that
// the command cannot read its memory, descriptors or environment through
// /proc/1), reads exactly one call message from descriptor 3, starts
// the command with the container's stdio (descriptor 3 is close-on-exec:
// the command never sees it), reports the command's start and end, and
// exits with the command's status the way a shell does (the code, or
// 128+N for signal N). It exits at once — and the kernel kills every
// other process of the container's pid namespace — when the control
// channel reaches end of file (the executor died) or the call's deadline
// passes.
//
// It uses only the standard library and golang.org/x/sys and is built
// static: CGO_ENABLED=0 go build ./cmd/dsh-sandbox-stub. The executor
// finds it next to its own executable or on PATH (docs/pool.md).
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Exit statuses of the stub itself, as a shell would choose them.
const (
	statusNotFound  = 127 // the command is not found
	statusCannotRun = 126 // found but not executable, or no working directory
	statusProtocol  = 125 // no valid call message
	statusKilled    = 137 // the executor died or the deadline passed
)

// defaultPath is the command search path when the call's environment
// has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// stubErrorPrefix starts what the stub itself writes to stderr.
const stubErrorPrefix = "dsh-sandbox-stub: "

func main() {
	os.Exit(run())
}

// run serves one call whose message arrives on descriptor 3 and returns
// the stub's exit status.
func run() int {
	prepareStub()
	// The control channel is read and written through the runtime's
	// poller, and the command reaped on SIGCHLD, so that waiting for
	// either holds no thread: the threads the stub has when its call
	// arrives are all it has (the executor counts them out of the
	// call's task limit then).
	if err := unix.SetNonblock(stub.ControlFD, true); err != nil {
		return statusProtocol
	}
	ctl := os.NewFile(stub.ControlFD, "control")
	if ctl == nil {
		return statusProtocol
	}
	report(ctl, stub.Report{Kind: stub.Ready})
	c, stdio, status := receiveCall(ctl)
	if status != 0 {
		return status
	}
	expired := make(chan struct{})
	deadline := time.AfterFunc(c.Deadline, func() { close(expired) })
	defer deadline.Stop()

	pid, chld, status := startCommand(ctl, c, stdio)
	if status != 0 {
		return status
	}
	return awaitCommand(ctl, pid, chld, expired)
}

// spareThreads is how many idle OS threads the stub keeps from its
// start (reserveThreads).
const spareThreads = 4

// reserveThreads makes the Go runtime start n more OS threads now, which
// then stay idle in its pool: when the command has used up the call's
// task limit, a runtime that wants one more thread (to run a goroutine
// while another waits in a system call) takes an idle one instead of
// failing to create it, which is fatal ("failed to create new OS
// thread", seen on docker under limits.pids). Each goroutine holds its
// own thread (LockOSThread) until all n have one, then lets it go back
// to the pool.
func reserveThreads(n int) {
	var started, release sync.WaitGroup
	release.Add(1)
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			started.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	started.Wait()
	release.Done()
}

// prepareStub sets up the stub's own process before anything else: one
// processor, spare threads, not dumpable, every inherited descriptor past stdio
// close-on-exec, and the signals meant for the command kept from it.
func prepareStub() {
	// One processor: the stub's goroutines mostly wait, and the runtime
	// then starts no threads to run them in parallel.
	runtime.GOMAXPROCS(1)
	reserveThreads(spareThreads)
	// Nobody in the container may read this process through /proc or
	// ptrace it: not its memory, descriptors or environment.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// Every inherited descriptor past stdio — the control channel — is
	// closed on exec.
	if err := unix.CloseRange(stub.ControlFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		for fd := stub.ControlFD; fd < 1024; fd++ {
			unix.CloseOnExec(fd)
		}
	}
	// Signals the runtime sends the container's processes (a timeout's
	// SIGTERM) are for the command: pid 1 keeps waiting.
	dropSignals(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGALRM)
}

// dropSignals catches the signals sigs and drops them, so that the stub
// survives them. A handler, not SIG_IGN, so that the command starts with
// default dispositions.
func dropSignals(sigs ...os.Signal) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, sigs...)
	go func() {
		for range ch {
		}
	}()
}

// receiveCall reads the call message from the control channel ctl with
// the command's stdio descriptors, if it has its own. It returns a
// nonzero exit status instead when no valid call comes: statusKilled if
// the executor let the slot go, else statusProtocol.
func receiveCall(ctl *os.File) (*stub.Command, []int, int) {
	head, stdio, err := readHeader(ctl)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, statusKilled // the executor let the slot go
		}
		return nil, nil, statusProtocol
	}
	c, err := stub.ReadCall(io.MultiReader(bytes.NewReader(head), ctl))
	if err != nil || c.Stdio != (len(stdio) == 3) || (!c.Stdio && len(stdio) != 0) {
		return nil, nil, statusProtocol
	}
	return c, stdio, 0
}

// startCommand starts the command of call c with the stdio descriptors
// stdio (or the stub's own) and reports its start on ctl. It returns its
// pid and the channel on which SIGCHLD arrives; or, when the command
// cannot start, a nonzero exit status, after it said why on the
// command's stderr and reported the failure.
func startCommand(ctl *os.File, c *stub.Command, stdio []int) (int, <-chan os.Signal, int) {
	// What the stub says about the command goes to the command's stderr.
	errOut := os.Stderr
	if c.Stdio {
		errOut = os.NewFile(uintptr(stdio[2]), "stderr")
	}
	path, status, msg := resolveCommand(c)
	if status != 0 {
		fmt.Fprintf(errOut, "%s%s\n", stubErrorPrefix, msg)
		report(ctl, stub.Report{Kind: stub.Failed, Value: int32(status)})
		return 0, nil, status
	}
	attr := &syscall.ProcAttr{Env: c.Env, Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{}}
	if c.Stdio {
		attr.Files = []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])}
	}
	if c.Terminal {
		// The terminal becomes the command's: give it up, then the
		// command makes it its controlling terminal in a new session.
		_ = unix.IoctlSetInt(0, unix.TIOCNOTTY, 0)
		attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = true, true, 0
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	pid, err := syscall.ForkExec(path, c.Argv, attr)
	if err != nil {
		status = startFailureStatus(err)
		fmt.Fprintf(errOut, "%s%s: %v\n", stubErrorPrefix, c.Argv[0], err)
		report(ctl, stub.Report{Kind: stub.Failed, Value: int32(status)})
		return 0, nil, status
	}
	if c.Stdio {
		// Only the command holds the call's pipes: its output ends
		// when it and what it started are gone.
		for _, fd := range stdio {
			unix.Close(fd)
		}
	}
	report(ctl, stub.Report{Kind: stub.Started, Value: int32(pid)})
	return pid, chld, 0
}

// awaitCommand waits until the command pid ends (reaped on chld), the
// executor is gone (ctl reaches end of file) or the call's deadline
// passes (expired closes), reports which, and returns the stub's exit
// status.
func awaitCommand(ctl *os.File, pid int, chld <-chan os.Signal, expired <-chan struct{}) int {
	exited := make(chan unix.WaitStatus, 1)
	go reap(pid, chld, exited)
	gone := make(chan struct{})
	go func() {
		var b [1]byte
		_, _ = ctl.Read(b[:]) // nothing more is sent: any return means the executor is gone
		close(gone)
	}()
	select {
	case ws := <-exited:
		report(ctl, stub.Report{Kind: stub.Exited, Value: int32(ws)})
		return exitStatus(ws)
	case <-gone:
		return statusKilled
	case <-expired:
		report(ctl, stub.Report{Kind: stub.Expired})
		return statusKilled
	}
}

// resolveCommand finds the command of call c and enters its working
// directory. It returns the command's path, or a shell's status and
// message.
func resolveCommand(c *stub.Command) (string, int, string) {
	path, status, msg := lookPath(c.Argv[0], c.Env)
	if status == 0 {
		if err := unix.Chdir(c.Dir); err != nil {
			status, msg = statusCannotRun, fmt.Sprintf("cd %s: %v", c.Dir, err)
		}
	}
	return path, status, msg
}

// startFailureStatus is the exit status for a command that could not
// start with error err: not found, or found but not runnable.
func startFailureStatus(err error) int {
	if errors.Is(err, unix.ENOENT) {
		return statusNotFound
	}
	return statusCannotRun
}

// exitStatus is the exit status a shell gives a command that ended with
// wait status ws: its code, or 128+N for signal N.
func exitStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// readHeader reads the header of the call message from the control
// channel ctl (non-blocking) with the descriptors attached to it
// (close-on-exec): the command's stdin, stdout and stderr, or none.
func readHeader(ctl *os.File) ([]byte, []int, error) {
	rc, err := ctl.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	head := make([]byte, stub.HeaderSize)
	oob := make([]byte, unix.CmsgSpace(3*4))
	var fds []int
	for n := 0; n < len(head); {
		var rn, oobn int
		var err error
		rerr := rc.Read(func(fd uintptr) bool {
			rn, oobn, _, _, err = unix.Recvmsg(int(fd), head[n:], oob, unix.MSG_CMSG_CLOEXEC)
			return !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return nil, nil, err
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, nil, err
			}
			for i := range msgs {
				got, err := unix.ParseUnixRights(&msgs[i])
				if err != nil {
					return nil, nil, err
				}
				fds = append(fds, got...)
			}
		}
		if rn == 0 {
			if n == 0 {
				return nil, nil, io.EOF
			}
			return nil, nil, io.ErrUnexpectedEOF
		}
		n += rn
	}
	return head, fds, nil
}

// reap reaps every child that ended (pid 1 inherits the orphans of the
// container) each time chld (SIGCHLD) fires, and sends the wait status
// of pid once it ends.
func reap(pid int, chld <-chan os.Signal, exited chan<- unix.WaitStatus) {
	for range chld {
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || wpid <= 0 {
				break // none ended (0), or no children left
			}
			if wpid == pid {
				exited <- ws
				return
			}
		}
	}
}

// report writes r to the control channel; the executor may be gone.
func report(ctl *os.File, r stub.Report) {
	_, _ = ctl.Write(r.Encode())
}

// lookPath finds the command as a shell's exec does: a name with a
// slash as it is, else the first executable regular file of that name
// in the PATH of env (a default one when env has none). It returns the
// path, or a shell's status and message.
func lookPath(name string, env []string) (string, int, string) {
	if strings.Contains(name, "/") {
		return name, 0, ""
	}
	dirs := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			dirs = v
		}
	}
	denied := ""
	for _, dir := range filepath.SplitList(dirs) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if unix.Access(p, unix.X_OK) == nil {
			return p, 0, ""
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return "", statusCannotRun, denied + ": permission denied"
	}
	return "", statusNotFound, name + ": not found"
}
