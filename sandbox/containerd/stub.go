package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/cio"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/cgroup"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Every call but one on a terminal runs through the stub in attach mode
// (stub.AttachArg): the container's pid 1 is the static stub, bound in
// read-only at stubTarget, and the call's argv, environment and working
// directory never enter the container's spec: they reach the stub in
// its call message, over the task's stdin. That stdin is no lifeline
// here: the shim holds a writer of its FIFO itself until told to close
// it, so the end of the executor is no end of file. The lifeline is a
// FIFO of the call's own (lifelineFile in the call's directory, bound
// read-only at lifelineTarget, stub.LifelineArg) whose only writer is
// the executor: when the executor dies, the stub kills everything and
// exits. The stub also ends the call at its deadline, with or without
// the executor.
const (
	stubTarget     = "/.dsh-sandbox-stub"
	lifelineTarget = "/.dsh-sandbox-lifeline"
	lifelineFile   = "lifeline"
)

// stubSlack is how long after the call's timeout and kill grace the
// stub ends the call itself: it acts only when the executor cannot.
const stubSlack = 2 * time.Second

// withStub turns spec, whose process is the call's command, into one
// whose process is the stub at host with the lifeline FIFO at fifo, and
// returns the call message that binds the command: the spec's command
// line, environment and working directory, and the call's deadline.
func withStub(spec *specs.Spec, host, fifo string, deadline time.Duration) ([]byte, error) {
	p := spec.Process
	msg := stub.Command{Argv: p.Args, Env: p.Env, Dir: p.Cwd, Deadline: deadline}
	b, err := msg.Encode()
	if err != nil {
		return nil, err
	}
	p.Args = []string{stubTarget, stub.AttachArg, stub.RawArg, stub.LifelineArg, lifelineTarget} // the shim logs nothing
	p.Env = []string{}
	p.Cwd = "/"
	spec.Mounts = append(spec.Mounts,
		specs.Mount{Destination: stubTarget, Type: "bind", Source: host, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		specs.Mount{Destination: lifelineTarget, Type: "bind", Source: fifo, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}},
	)
	return b, nil
}

// makeLifeline makes the call's lifeline FIFO in its directory dir and
// opens it for reading and writing (the open does not wait for a
// reader); the executor holds that descriptor, the only writer, until
// the call ends. The FIFO is readable by the call's user, whatever uid
// it maps to, and writable by the service alone.
func makeLifeline(dir string) (*os.File, error) {
	path := filepath.Join(dir, lifelineFile)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("lifeline FIFO: %w", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("lifeline FIFO: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("lifeline FIFO: %w", err)
	}
	return f, nil
}

// startStub creates the task with its stdio attached to the executor's
// end of the stub's stream, starts it and binds the call through the
// stub.
func (ct *callContainer) startStub(ctx context.Context, stdio driver.Stdio) (driver.Process, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	diag := &stub.LimitedBuffer{Max: 4096}
	task, exitC, err := ct.startTask(ctx, cio.WithStreams(inR, outW, diag))
	if err != nil {
		return nil, err
	}
	p := &stubTask{
		callTask: callTask{ct: ct, t: task, finished: make(chan struct{}), done: make(chan struct{})},
		a:        stub.Attach(inW, outR, ct.msg, stdio.Stdin, stdio.Stdout, stdio.Stderr),
		outW:     outW,
		diag:     diag,
		exited:   make(chan struct{}),
	}
	go func() {
		defer close(p.exited)
		p.status = <-exitC
	}()
	go func() {
		defer close(p.done)
		select {
		case <-p.a.Done():
		case <-p.exited:
		}
	}()
	return p, nil
}

// stubTask is a call bound through the stub. Signal is callTask's: the
// daemon signals every process of the container, the stub included,
// which ignores all but SIGKILL.
type stubTask struct {
	callTask
	a      *stub.Attached
	outW   *io.PipeWriter
	diag   *stub.LimitedBuffer // the stub's own stderr
	exited chan struct{}       // closed once status is set
}

// Wait lets the stub go (its lifeline ends, and it exits), waits for the
// task's exit and the end of its output, at most outputDrain each, and
// reads the outcome the stub reported. Without a report (the task was
// killed, or the daemon went away) it falls back to the task's status,
// as a call without the stub does.
func (p *stubTask) Wait(context.Context, bool) (driver.Exit, error) {
	defer close(p.finished)
	e, call := p.ct.e, p.ct.call
	// Whether the stub's final report came before anything of the
	// teardown: a report that comes after the daemon went away may be
	// of a command the lifeline's end killed.
	reported := false
	select {
	case <-p.a.Done():
		_, _, rerr := p.a.Outcome()
		reported = rerr == nil
	default:
	}
	p.ct.closeLifeline()
	_ = p.a.Hangup()
	exit := time.NewTimer(outputDrain)
	select {
	case <-p.exited:
	case <-exit.C:
		call.Log.Warn("the task did not exit after the call ended; killing it")
		e.killCall(call.Log, call.ID)
		<-p.exited
	}
	exit.Stop()
	p.drainOutput()
	p.outW.CloseWithError(io.EOF)
	if _, _, werr := p.status.Result(); werr != nil && !reported {
		// The daemon went away during the call: its outcome is
		// unknown (drainOutput killed what was left of it).
		return driver.Exit{}, classify(werr, "call %s: wait for the task", call.ID)
	}

	rep, oom, rerr := p.a.Outcome()
	oom = oom || cgroup.OOMKilled(cgroupDirs(cgroupsPath(e.instance, call.ID)))
	if rerr == nil {
		x, err := driver.StubExit(rep)
		if err != nil {
			return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: %v", call.ID, err)
		}
		x.OOMKilled = oom
		return x, nil
	}
	if errors.Is(rerr, stub.ErrMalformed) {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: %v", call.ID, rerr)
	}
	code, _, _ := p.status.Result()
	if errors.Is(rerr, stub.ErrNoPong) || code != 128+uint32(syscall.SIGKILL) {
		// Not killed by us or the daemon, and no report: the stub
		// failed.
		why := rerr.Error()
		if d := p.diag.String(); d != "" {
			why += " (stub: " + d + ")"
		}
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: status %d: %s", call.ID, code, why)
	}
	return driver.Exit{Status: int(code), Init: true, OOMKilled: oom}, nil
}

// closeLifeline closes the executor's end of the call's lifeline FIFO:
// the stub, if it still runs, kills the call and exits. It is
// idempotent.
func (ct *callContainer) closeLifeline() {
	ct.lifelineOnce.Do(func() {
		if ct.lifeline != nil {
			ct.lifeline.Close()
		}
	})
}
