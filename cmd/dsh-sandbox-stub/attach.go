package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Attach mode (stub.AttachArg) serves a container whose only channel is
// its stdio, a Kubernetes pod bound through its attach stream: the call
// message, the command's stdin and signals arrive as frames on stdin, the
// command's output and the reports leave as frames on stdout (package
// stub has the protocol). It starts from init, before main, so that the
// descriptor-3 mode of main stays as it is.
//
// Options may follow: stub.RawArg (the stub's stdout is not escaped),
// then stub.LifelineArg PATH (the stub also opens PATH, a FIFO whose
// write end the executor holds, and ends the call, killing everything,
// when that reaches end of file: for a runtime whose stdin never ends
// while the container runs, as containerd's shim keeps a writer of the
// stdin FIFO itself).
func init() {
	if len(os.Args) < 2 || os.Args[1] != stub.AttachArg {
		return
	}
	args := os.Args[2:]
	raw := len(args) > 0 && args[0] == stub.RawArg
	if raw {
		args = args[1:]
	}
	switch {
	case len(args) == 0:
	case len(args) == 2 && args[0] == stub.LifelineArg:
		go watchLifeline(args[1])
	default:
		return // main refuses the arguments
	}
	os.Exit(runAttached(raw))
}

// commandPid is the command's pid once it runs, for watchLifeline.
var commandPid atomic.Int64

// watchLifeline reads the FIFO at path until its writers are gone (the
// executor died or let the call go), then kills every process of the
// call and exits the stub.
func watchLifeline(path string) {
	f, err := os.Open(path)
	if err == nil {
		_, err = io.Copy(io.Discard, f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%slifeline %s: %v\n", stubErrorPrefix, path, err)
	}
	if pid := int(commandPid.Load()); pid > 0 || os.Getpid() == 1 {
		killAll(pid, unix.SIGKILL)
	}
	os.Exit(statusKilled)
}

// drainGrace bounds how long the output of a call is read after its
// command and every other process were killed.
const drainGrace = 2 * time.Second

// framer writes frames to the stub's stdout, one at a time.
type framer struct {
	mu  sync.Mutex
	out io.Writer
	err error
}

func (f *framer) write(kind byte, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = stub.WriteFrames(f.out, kind, data)
	}
}

func (f *framer) report(r stub.Report) { f.write(stub.FrameReport, r.Encode()) }

// readAttachedCall answers the executor's pings, each with a pong, until
// its call message comes, and reads that.
func readAttachedCall(in *bufio.Reader, out *framer) (*stub.Command, error) {
	for {
		b, err := in.Peek(1)
		if err != nil {
			return nil, err
		}
		if b[0] != stub.FramePing {
			return stub.ReadCall(in)
		}
		f, err := stub.ReadFrame(in)
		if err != nil {
			return nil, err
		}
		if len(f.Data) != 0 {
			return nil, fmt.Errorf("%w: ping frame of %d bytes, want 0", stub.ErrMalformed, len(f.Data))
		}
		out.write(stub.FramePong, nil)
	}
}

// runAttached serves one call in attach mode, its stdout unescaped if
// raw, and returns the stub's exit status.
func runAttached(raw bool) int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	dropSignals(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGALRM, unix.SIGPIPE)
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	// Escaped, unless raw: no newline byte reaches the runtime's line
	// logger.
	out := &framer{out: stub.NewEscaper(os.Stdout)}
	if raw {
		out.out = os.Stdout
	}
	c, err := readAttachedCall(in, out)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return statusKilled // the executor let the pod go unused
		}
		fmt.Fprintf(os.Stderr, "%s%v\n", stubErrorPrefix, err)
		return statusProtocol
	}
	expired := make(chan struct{})
	deadline := time.AfterFunc(c.Deadline, func() { close(expired) })
	defer deadline.Stop()

	if c.Terminal {
		return failAttached(in, out, statusCannotRun, "attach mode runs no terminal")
	}
	path, status, msg := resolveCommand(c)
	if status != 0 {
		return failAttached(in, out, status, msg)
	}
	cmd, chld, status := startAttachedCommand(in, out, c, path)
	if status != 0 {
		return status
	}
	commandPid.Store(int64(cmd.pid))
	out.report(stub.Report{Kind: stub.Started, Value: int32(cmd.pid)})

	pumps := pumpOutput(out, cmd.stdout, cmd.stderr)
	exited := make(chan unix.WaitStatus, 1)
	go reap(cmd.pid, chld, exited)
	gone := make(chan struct{})
	go readInput(in, cmd.stdin, cmd.pid, gone)

	select {
	case ws := <-exited:
		return finishAttached(out, cmd.pid, ws, pumps, gone)
	case <-gone:
		killAll(cmd.pid, unix.SIGKILL)
		return statusKilled
	case <-expired:
		killAll(cmd.pid, unix.SIGKILL)
		out.report(stub.Report{Kind: stub.Expired})
		awaitHangUp(gone)
		return statusKilled
	}
}

// failAttached ends a call whose command does not run: it says why (msg)
// on the command's stderr, reports the failure with status, waits for
// the executor to hang up (reading and dropping the rest of in), and
// returns status.
func failAttached(in io.Reader, out *framer, status int, msg string) int {
	out.write(stub.FrameStderr, []byte(stubErrorPrefix+msg+"\n"))
	out.report(stub.Report{Kind: stub.Failed, Value: int32(status)})
	hungUp := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(hungUp)
	}()
	awaitHangUp(hungUp)
	return status
}

// attachedCommand is a command the attach mode started: its pid, the
// write end of its stdin and the read ends of its stdout and stderr.
type attachedCommand struct {
	pid                   int
	stdin, stdout, stderr *os.File
}

// startAttachedCommand starts the command at path of call c in a process group
// of its own, its stdio pipes to the stub. It returns the command and
// the channel on which SIGCHLD arrives; or, when the command cannot
// start, the nonzero exit status failAttached returned.
func startAttachedCommand(in io.Reader, out *framer, c *stub.Command, path string) (*attachedCommand, <-chan os.Signal, int) {
	var ends [3][2]*os.File // stdin, stdout, stderr: read and write ends
	for i := range ends {
		r, w, err := os.Pipe()
		if err != nil {
			closePipes(ends[:i])
			return nil, nil, failAttached(in, out, statusCannotRun, err.Error())
		}
		ends[i] = [2]*os.File{r, w}
	}
	attr := &syscall.ProcAttr{
		Env:   c.Env,
		Files: []uintptr{ends[0][0].Fd(), ends[1][1].Fd(), ends[2][1].Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	pid, err := syscall.ForkExec(path, c.Argv, attr)
	// The command's ends are its own now (or nobody's).
	ends[0][0].Close()
	ends[1][1].Close()
	ends[2][1].Close()
	if err != nil {
		signal.Stop(chld)
		ends[0][1].Close()
		ends[1][0].Close()
		ends[2][0].Close()
		return nil, nil, failAttached(in, out, startFailureStatus(err), fmt.Sprintf("%s: %v", c.Argv[0], err))
	}
	return &attachedCommand{pid: pid, stdin: ends[0][1], stdout: ends[1][0], stderr: ends[2][0]}, chld, 0
}

// closePipes closes both ends of each pipe.
func closePipes(pipes [][2]*os.File) {
	for _, p := range pipes {
		p[0].Close()
		p[1].Close()
	}
}

// pumpOutput copies the command's stdout and stderr to out as frames of
// their kinds, each in its own goroutine, until each ends. The returned
// group is done when both have.
func pumpOutput(out *framer, stdout, stderr *os.File) *sync.WaitGroup {
	var pumps sync.WaitGroup
	for _, p := range []struct {
		r    *os.File
		kind byte
	}{{stdout, stub.FrameStdout}, {stderr, stub.FrameStderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := p.r.Read(buf)
				if n > 0 {
					out.write(p.kind, buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return &pumps
}

// finishAttached ends a call whose command pid ended with wait status
// ws: it kills what the command left running, lets its output drain
// (pumps, at most drainGrace), reports an out-of-memory kill and the
// exit, waits for the executor to hang up (gone), and returns the
// command's exit status.
func finishAttached(out *framer, pid int, ws unix.WaitStatus, pumps *sync.WaitGroup, gone <-chan struct{}) int {
	// Whatever the command left running goes with it, as when a
	// container's init ends; then its output is complete.
	killAll(pid, unix.SIGKILL)
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
	}
	if oomKilled() {
		out.write(stub.FrameOOM, nil)
	}
	out.report(stub.Report{Kind: stub.Exited, Value: int32(ws)})
	awaitHangUp(gone)
	return exitStatus(ws)
}

// hangUpWait bounds how long the stub waits, after its final report, for
// the executor to close its stdin.
const hangUpWait = 5 * time.Second

// awaitHangUp waits until the executor closes the stub's stdin (gone), at
// most hangUpWait: the executor does so once it has the final report. A
// container's attach streams end when it exits, and the tail of what it
// wrote just before could be lost on the way (a call of true lost its
// report); while the stub waits, the stream stays open and delivers it.
func awaitHangUp(gone <-chan struct{}) {
	select {
	case <-gone:
	case <-time.After(hangUpWait):
	}
}

// readInput reads the executor's frames after the call message: stdin
// bytes go to the command through a queue (a command that does not read
// its stdin never holds up a signal), signals go to every process. It
// closes gone when the executor's stream ends or breaks.
func readInput(in io.Reader, stdinW *os.File, pid int, gone chan<- struct{}) {
	q := &stdinQueue{w: stdinW}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	defer close(gone)
	defer q.close()
	for {
		f, err := stub.ReadFrame(in)
		if err != nil {
			return
		}
		switch f.Kind {
		case stub.FrameStdin:
			q.push(f.Data)
		case stub.FrameStdinEnd:
			q.close()
		case stub.FrameSignal:
			sig, err := stub.FrameSignalNumber(f)
			if err != nil {
				return
			}
			killAll(pid, unix.Signal(sig))
		default:
			fmt.Fprintf(os.Stderr, "%sunknown frame kind %q\n", stubErrorPrefix, f.Kind)
			return
		}
	}
}

// stdinQueue feeds the command's stdin in order, without bound: the
// executor sends no more than the call's stdin.
type stdinQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks [][]byte
	closed bool
	w      *os.File
}

func (q *stdinQueue) push(b []byte) {
	q.mu.Lock()
	if !q.closed {
		q.chunks = append(q.chunks, b)
	}
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *stdinQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *stdinQueue) run() {
	defer q.w.Close()
	broken := false
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.chunks) == 0 {
			q.mu.Unlock()
			return
		}
		b := q.chunks[0]
		q.chunks = q.chunks[1:]
		q.mu.Unlock()
		if !broken {
			// A command that exits before reading all of its stdin
			// breaks the pipe: the rest is dropped.
			if _, err := q.w.Write(b); err != nil {
				broken = true
			}
		}
	}
}

// killAll sends sig to every process of the call: as pid 1 of the
// container that is every other process of its pid namespace, else (a
// stub run by hand) the command's process group.
func killAll(pid int, sig unix.Signal) {
	if os.Getpid() == 1 {
		_ = unix.Kill(-1, sig)
		return
	}
	_ = unix.Kill(-pid, sig)
}

// oomKilled reports whether the out-of-memory killer killed a process
// in the container's memory cgroup (its own view of /sys/fs/cgroup: the
// v1 memory controller's memory.oom_control, or the v2 memory.events).
// Only pid 1 of a container asks; a stub run by hand would read the
// host's root cgroup.
func oomKilled() bool {
	if os.Getpid() != 1 {
		return false
	}
	for _, f := range []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				return err == nil && n > 0
			}
		}
	}
	return false
}
