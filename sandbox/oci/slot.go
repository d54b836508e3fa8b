package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/capture"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/cgroup"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// stubTarget is where the stub program is mounted, read-only, in a
// container of runc or crun: the container's process.
const stubTarget = "/.dsh-sandbox-stub"

// stubSlack is how long after the call's timeout and kill grace the stub
// ends the call by itself: the executor's own supervision acts first,
// the stub only when the executor cannot (it is frozen or gone).
const stubSlack = 500 * time.Millisecond

// outputDrain is how long the output copies may go on after the runtime
// exited (everything in the container is gone then; only what is in the
// pipes is left).
const outputDrain = 5 * time.Second

// runtimeFinish is how long teardown lets a runtime whose container's
// stub has ended finish on its own before it is killed.
const runtimeFinish = 10 * time.Second

// usesStub reports whether containers of runtime run the stub. runsc
// cannot pass the control descriptor on (it has no --preserve-fds): its
// containers are created with the call's command in them, and Bind
// starts them.
func usesStub(runtime string) bool { return runtime != RuntimeRunsc }

// withStub makes the stub at host the container's process, with an
// empty environment; the call's own command line, environment and
// working directory reach it at Bind, over the control channel.
func withStub(host string) policy.SpecOpt {
	return func(s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.Args = []string{stubTarget}
		s.Process.Env = []string{}
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: stubTarget, Type: "bind", Source: host,
			Options: []string{"bind", "ro", "nosuid", "nodev"},
		})
		return nil
	}
}

// slot is a call's container between Prepare and the end of the call:
// with the stub, its runtime runs from Prepare on and the stub waits for
// the call on ctl; without (runsc), the runtime starts at Bind.
type slot struct {
	e    *Executor
	call *driver.Running // the call the slot was prepared for
	b    *bundle
	bash string // the image's shell for Request.Command; "" means /bin/sh

	cmd              *exec.Cmd // the runtime's foreground run
	pidFile, logFile string
	theirs           []*os.File    // the runtime's ends of ctl and the pipes, closed once it runs
	callEnds         []*os.File    // stub only: the command's ends of the pipes, sent at Bind
	ctl              *os.File      // the executor's end of the control channel (stub only)
	stdin            *os.File      // write end of the container's stdin; nil on a terminal
	stdout, stderr   *os.File      // read ends of the container's output; nil on a terminal
	tty              *callTerminal // nil without a terminal
	done             chan struct{} // closed once waitErr is set
	waitErr          error

	bound   atomic.Bool
	reports chan struct{} // stub only: closed when the control channel ended
	ended   chan struct{} // stub only: closed once the stub reported the call's end (status is set)
	// runtimeErr is the runtime's own stderr with the stub (the call's
	// output has pipes of its own); read only after the runtime exited.
	runtimeErr bytes.Buffer
	started    bool // the stub reported the command started (or failed to): set before reports closes
	status     int  // the stub's exit status for the call's end: the command's, 128+N for signal N
}

func (s *slot) ID() string { return s.call.ID }

// newSlot prepares the runtime command of the slot and its stdio; their
// undo goes onto the call's cleanup stack.
func (e *Executor) newSlot(call *driver.Running, b *bundle, bash string) (_ *slot, err error) {
	s := &slot{
		e: e, call: call, b: b, bash: bash,
		pidFile: b.path(bundlePid),
		logFile: b.path(bundleLog),
		done:    make(chan struct{}),
	}
	s.cmd = e.rt.runCommand(context.Background(), b.dir, call.ID, s.pidFile, s.logFile)
	call.Cleanup.Add("slot stdio", func(context.Context) error {
		for _, f := range append(append(s.theirs, s.callEnds...), s.ctl, s.stdin, s.stdout, s.stderr) {
			if f != nil {
				f.Close()
			}
		}
		return nil
	})
	if usesStub(e.rt.name) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("control channel: %w", err)
		}
		s.ctl = os.NewFile(uintptr(fds[0]), "control")
		peer := os.NewFile(uintptr(fds[1]), "control-peer")
		s.theirs = append(s.theirs, peer)
		s.cmd.ExtraFiles = []*os.File{peer}
		// "run [flags] ID": the flag goes before the container id.
		n := len(s.cmd.Args)
		s.cmd.Args = append(s.cmd.Args[:n-1:n-1], "--preserve-fds", "1", s.cmd.Args[n-1])
	}
	if call.Request.Terminal != nil {
		if s.tty, err = openTerminal(s.cmd, e.rt.name, call.Request.Terminal); err != nil {
			return nil, err
		}
		call.Cleanup.Add("terminal", func(context.Context) error {
			s.tty.close()
			return nil
		})
		return s, nil
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	s.stdin = inW
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	s.stdout = outR
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	s.stderr = errR
	if s.ctl == nil {
		s.theirs = append(s.theirs, inR, outW, errW)
		s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = inR, outW, errW
		return s, nil
	}
	// With the stub, the pipes reach it with the call message, over the
	// control channel, and only the command gets them: the runtime's own
	// stdio (which it keeps until it has deleted the container) is not
	// the call's output, so the output ends when the call does.
	s.callEnds = []*os.File{inR, outW, errW}
	s.cmd.Stderr = &s.runtimeErr
	return s, nil
}

// start starts the runtime: with the stub, it waits until the stub
// reports it is ready for its call.
func (s *slot) start(ctx context.Context) error {
	e, call := s.e, s.call
	if err := e.step("start"); err != nil {
		return err
	}
	if err := e.rt.start(s.cmd); err != nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "oci: call %s: start %s: %w", call.ID, e.rt.name, err)
	}
	// The runtime has its copies of its ends: close ours, so that the
	// output ends when the container does.
	for _, f := range s.theirs {
		f.Close()
	}
	s.theirs = nil
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	// On an early return (a failure, a panic, a slot never bound), stop
	// the runtime before the container is deleted: a runtime still
	// running would keep its cgroups busy.
	call.Cleanup.Add("runtime process", s.stopRuntime)
	if err := e.step("started"); err != nil {
		return err
	}
	if s.ctl == nil {
		return nil
	}
	return s.waitReady(ctx)
}

// stopRuntime ends the runtime process unless it has exited already:
// after the call's end it first gives the runtime runtimeFinish to
// delete the container on its own, then it kills the stub, the
// container and the runtime and waits for the runtime to exit.
func (s *slot) stopRuntime(ctx context.Context) error {
	e, call := s.e, s.call
	select {
	case <-s.done:
		return nil
	default:
	}
	if s.finished(ctx) {
		return nil
	}
	if s.ctl != nil {
		s.ctl.Close() // the stub exits, and the container with it
	}
	_ = e.killAll(ctx, call.ID, s.cmd, s.pidFile, syscall.SIGKILL)
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s run of %s did not exit: %w", e.rt.name, call.ID, ctx.Err())
	}
}

// finished reports whether the runtime exited on its own within
// runtimeFinish after the stub reported the call's end (the runtime is
// deleting the container then). Without that report it returns false
// at once.
func (s *slot) finished(ctx context.Context) bool {
	if s.ended == nil {
		return false
	}
	select {
	case <-s.ended:
	default:
		return false
	}
	t := time.NewTimer(runtimeFinish)
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// waitReady waits until the stub reports it is ready for its call. When
// the stub reports anything else, or the control channel ends, the
// runtime failed to start the container: waitReady waits for it to exit
// and returns its message.
func (s *slot) waitReady(ctx context.Context) error {
	e, call := s.e, s.call
	ready := make(chan error, 1)
	go func() {
		r, err := stub.ReadReport(s.ctl)
		if err == nil && r.Kind != stub.Ready {
			err = fmt.Errorf("stub reported %q before its call", r.Kind)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			<-s.done
			return sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: %s could not start the container: %s", call.ID, e.rt.name, s.failure())
		}
	case <-ctx.Done():
		return sandbox.Errorf(sandbox.ErrUnavailable, "oci: call %s not started: %w", call.ID, context.Cause(ctx))
	}
	return nil
}

// failure is the runtime's message after it failed to start the
// container: its log, else what it wrote to stderr.
func (s *slot) failure() string {
	var text string
	switch {
	case s.ctl != nil:
		text = s.runtimeErr.String() // the runtime has exited: nobody writes it
	case s.stderr != nil:
		b, _ := io.ReadAll(io.LimitReader(s.stderr, 64<<10))
		text = string(b)
	}
	return runtimeFailure(s.logFile, text)
}

// alive reports whether the slot's container still runs and waits.
func (s *slot) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return !s.bound.Load()
	}
}

// Bind hands call to the slot: over the control channel to the stub, or
// (runsc) by starting the runtime with the call baked in; then the
// call's stdio is connected to the container's.
func (s *slot) Bind(ctx context.Context, call *driver.Running, stdio driver.Stdio) (driver.Process, error) {
	if !s.bound.CompareAndSwap(false, true) {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: slot %s is bound already", call.ID, s.call.ID)
	}
	p := &runtimeProcess{s: s, call: call, ctx: ctx, stderr: stdio.Stderr}
	if s.ctl == nil {
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	} else {
		if call.ID != s.call.ID {
			// From the pool: reap finds the call's spill files by this.
			if err := os.WriteFile(s.b.path(bundleBound), []byte(call.ID+"\n"), 0o600); err != nil {
				return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: %v", call.ID, err)
			}
		}
		if s.call.Request.Session.TranscriptDir == "" && call.Request.Session.TranscriptDir != "" {
			// A slot for any session of its workspace (late.go).
			if err := s.attachTranscript(call.Request); err != nil {
				return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: mount the session directory: %v", call.ID, err)
			}
		}
		if s.b.tasks > 0 {
			if err := s.e.layout.limitTasks(containerCgroupsPath(s.e.instance, s.call.ID), s.b.tasks); err != nil {
				return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: task limit: %v", call.ID, err)
			}
		}
		msg, err := (&stub.Command{
			Argv:     commandLine(call.Request, s.bash),
			Env:      call.Env,
			Dir:      call.Workdir,
			Deadline: stubDeadline(call.Timeout, s.e.opts.KillGrace),
			Terminal: s.tty != nil,
			Stdio:    s.tty == nil,
		}).Encode()
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "oci: call %s: %v", call.ID, err)
		}
		s.reports, s.ended = make(chan struct{}), make(chan struct{})
		if err := s.send(msg); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: the slot's stub is gone: %v", call.ID, err)
		}
		go s.readReports()
	}
	if s.tty != nil {
		s.tty.start(s.cmd, call.Request, stdio.Stdout, s.done)
		return p, nil
	}
	p.copies.Add(2)
	for _, c := range []struct {
		w io.Writer
		r *os.File
	}{{stdio.Stdout, s.stdout}, {stdio.Stderr, s.stderr}} {
		go func() {
			defer p.copies.Done()
			_, _ = io.Copy(c.w, c.r)
		}()
	}
	if stdio.Stdin == nil {
		s.stdin.Close()
	} else {
		go func(w *os.File, src io.Reader) {
			_, _ = io.Copy(w, src) // EPIPE when the command does not read it all
			w.Close()
		}(s.stdin, stdio.Stdin)
	}
	return p, nil
}

// send writes the call message to the stub, with the command's ends of
// the stdio pipes (when it has them) attached to its first bytes, and
// closes ours of those ends.
func (s *slot) send(msg []byte) error {
	if len(s.callEnds) == 0 {
		_, err := s.ctl.Write(msg)
		return err
	}
	fds := make([]int, len(s.callEnds))
	for i, f := range s.callEnds {
		fds[i] = int(f.Fd())
	}
	rc, err := s.ctl.SyscallConn()
	if err != nil {
		return err
	}
	head := msg[:stub.HeaderSize]
	var n int
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		n, serr = unix.SendmsgN(int(fd), head, unix.UnixRights(fds...), nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	for _, f := range s.callEnds {
		f.Close()
	}
	s.callEnds = nil
	_, err = s.ctl.Write(msg[n:])
	return err
}

// readReports reads the stub's reports until the control channel ends.
// The call ends with the stub's report of it, not with the runtime's
// exit: the runtime deletes the container before it exits, which is
// teardown's time, not the call's.
func (s *slot) readReports() {
	defer close(s.reports)
	end := func(status int) {
		s.status = status
		close(s.ended)
	}
	for {
		r, err := stub.ReadReport(s.ctl)
		if err != nil {
			return
		}
		switch r.Kind {
		case stub.Started:
			s.started = true
		case stub.Failed:
			s.started = true
			end(int(r.Value))
			return
		case stub.Expired:
			end(128 + int(syscall.SIGKILL))
			return
		case stub.Exited:
			ws := syscall.WaitStatus(r.Value)
			if ws.Signaled() {
				end(128 + int(ws.Signal()))
			} else {
				end(ws.ExitStatus())
			}
			return
		}
	}
}

// commandLine is what the stub executes for req: Argv exactly, else the
// image's bash (or /bin/sh) -c Command.
func commandLine(req *sandbox.Request, bash string) []string {
	if req.Argv != nil {
		return req.Argv
	}
	if bash == "" {
		bash = "/bin/sh"
	}
	return []string{bash, "-c", req.Command}
}

// runtimeProcess is a bound slot's runtime process.
type runtimeProcess struct {
	s      *slot
	call   *driver.Running
	ctx    context.Context // the call's
	stderr *capture.Writer
	copies sync.WaitGroup
	once   sync.Once
	done   chan struct{} // Done's, with the stub
}

// Done is closed when the stub reported the call's end, or when the
// stub or the runtime is gone without one.
func (p *runtimeProcess) Done() <-chan struct{} {
	s := p.s
	if s.reports == nil {
		return s.done
	}
	p.once.Do(func() {
		p.done = make(chan struct{})
		go func() {
			select {
			case <-s.ended:
			case <-s.reports:
			case <-s.done:
			}
			close(p.done)
		}()
	})
	return p.done
}

func (p *runtimeProcess) Signal(_ context.Context, sig syscall.Signal) error {
	return p.s.e.killAll(p.ctx, p.s.call.ID, p.s.cmd, p.s.pidFile, sig)
}

// Wait reads how the runtime process ended: a runtime that could not
// start the container is an error (nothing ran), and so is one whose
// wait failed, and a stub that ended before it started the command.
func (p *runtimeProcess) Wait(_ context.Context, stopped bool) (driver.Exit, error) {
	s, call := p.s, p.call
	e := s.e
	if s.tty != nil {
		s.tty.finish(call.Log)
	} else {
		driver.Drain(&p.copies, outputDrain, func() {
			call.Log.Warn("output did not end after the container exited; closing it")
			s.stdout.Close()
			s.stderr.Close()
		})
	}
	if s.reports != nil {
		select {
		case <-s.ended:
			// The stub reported how the call ended; the runtime
			// finishes (and deletes the container) meanwhile.
			x := driver.Exit{Status: s.status, Init: true}
			x.OOMKilled = s.b.oom.fired() || cgroup.OOMKilled(e.layout.dirsFor(cgroupsPath(e.instance, s.call.ID)))
			return x, nil
		case <-s.reports:
		case <-s.done:
		}
		<-s.done // no report: the runtime's exit tells
	}
	var exitErr *exec.ExitError
	if s.waitErr != nil && !errors.As(s.waitErr, &exitErr) && !errors.Is(s.waitErr, exec.ErrWaitDelay) {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: %s run: %w", call.ID, e.rt.name, s.waitErr)
	}
	if _, err := os.Stat(s.pidFile); err != nil && !stopped {
		// The container never started: nothing ran.
		errOut, _ := p.stderr.Stream()
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: %s could not start the container: %s", call.ID, e.rt.name, runtimeFailure(s.logFile, errOut.Text))
	}
	if s.reports != nil {
		<-s.reports // the stub is gone, and so is the runtime: the channel has ended
		if !s.started && !stopped {
			return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: the container's stub ended before it started the command", call.ID)
		}
	}
	ws, _ := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	x := driver.WaitExit(ws, true)
	// The call's cgroups (the container's parents) still exist: teardown
	// removes them. See prepareOOMAccounting.
	x.OOMKilled = s.b.oom.fired() || cgroup.OOMKilled(e.layout.dirsFor(cgroupsPath(e.instance, s.call.ID)))
	return x, nil
}

// stubDeadline is how long the stub lets the call run: its timeout plus
// the kill grace and some slack, or, for a call without a deadline (a
// background job under a policy that sets none), a century: the
// lifeline still ends it with its supervisor.
func stubDeadline(timeout, grace time.Duration) time.Duration {
	if timeout <= 0 {
		return 100 * 365 * 24 * time.Hour
	}
	return timeout + grace + stubSlack
}
