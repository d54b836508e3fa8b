package docker

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Every call but one on a terminal runs through the stub in attach mode
// (stub.AttachArg): the container's pid 1 is the static stub, bound in
// read-only at stubTarget, and the call's argv, environment and working
// directory never enter the container's configuration: they reach the
// stub in its call message, over the attach stream's stdin, which stays
// open for the whole call. When the executor dies the engine closes the
// container's stdin (StdinOnce), the stub kills everything and exits:
// the call does not outlive its supervisor. The stub also ends the call
// at its deadline, with or without the executor.
const stubTarget = "/.dsh-sandbox-stub"

// stubSlack is how long after the call's timeout and kill grace the
// stub ends the call itself: it acts only when the executor cannot.
const stubSlack = 2 * time.Second

// withStub turns the container configuration of a call, as it would run
// the command itself, into one whose pid 1 is the stub at host, and
// returns the call message that binds the command: cfg's command line,
// environment and working directory, and the call's deadline.
func withStub(cfg *container.Config, hc *container.HostConfig, host string, deadline time.Duration) ([]byte, error) {
	msg := stub.Command{Argv: cfg.Cmd, Env: cfg.Env, Dir: cfg.WorkingDir, Deadline: deadline}
	b, err := msg.Encode()
	if err != nil {
		return nil, err
	}
	cfg.Cmd = []string{stubTarget, stub.AttachArg, stub.RawArg} // no log driver: see containerConfig
	cfg.Entrypoint = []string{}
	cfg.Env = []string{}
	cfg.WorkingDir = "/"
	cfg.AttachStdin, cfg.OpenStdin, cfg.StdinOnce = true, true, true
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: host, Target: stubTarget, ReadOnly: true})
	return b, nil
}

// bindStub attaches to the container (stdin too: it is the stub's
// lifeline), starts it, and binds the call through the stub.
func (c *callContainer) bindStub(ctx context.Context, stdio driver.Stdio) (driver.Process, error) {
	outR, outW := io.Pipe()
	diag := &stub.LimitedBuffer{Max: 4096}
	r, err := c.attachStart(ctx, true, func(out io.Reader) error {
		_, err := stdcopy.StdCopy(outW, diag, out)
		outW.CloseWithError(io.EOF)
		return err
	})
	if err != nil {
		return nil, err
	}
	p := &stubProcess{c: c, running: r, diag: diag}
	p.a = stub.Attach(hijackedStdin{r.hj}, outR, c.msg, stdio.Stdin, stdio.Stdout, stdio.Stderr)
	return p, nil
}

// hijackedStdin is the write side of an attach connection: its Close
// half-closes the connection, so that the output still arrives.
type hijackedStdin struct{ hj types.HijackedResponse }

func (h hijackedStdin) Write(p []byte) (int, error) { return h.hj.Conn.Write(p) }
func (h hijackedStdin) Close() error                { return h.hj.CloseWrite() }

// stubProcess is a call bound through the stub.
type stubProcess struct {
	c *callContainer
	*running
	a    *stub.Attached
	diag *stub.LimitedBuffer // the stub's own stderr
}

// Done is closed at the stub's final report, or when its stream ends
// without one (the container died).
func (p *stubProcess) Done() <-chan struct{} { return p.a.Done() }

// Signal sends sig to every process of the call: SIGKILL through the
// engine to the stub (pid 1), whose death ends the pid namespace; any
// other signal through the stub.
func (p *stubProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.c.e.signal(p.bg, p.c.id, sig)
	}
	return p.a.Signal(int(sig), ctx.Done())
}

// Wait hangs up on the stub (which then exits), waits for the container
// to exit, at most outputDrain, and reads the outcome the stub reported.
// Without a report (the container was killed, or the engine went away)
// it falls back to the container's status, as a call without the stub
// does.
func (p *stubProcess) Wait(context.Context, bool) (driver.Exit, error) {
	e, call, bg := p.c.e, p.c.call, p.bg
	defer p.stopWait()
	defer p.hj.Close()
	_ = p.a.Hangup()
	drain := time.NewTimer(outputDrain)
	defer drain.Stop()
	var copyErr error
	select {
	case <-p.exited:
		select {
		case copyErr = <-p.copied:
		case <-drain.C:
			p.hj.Close()
			copyErr = errors.New("the output stream did not end after the container exited")
		}
	case <-drain.C:
		call.Log.Warn("the container did not exit after the call ended; closing its stream")
		p.hj.Close()
		copyErr = errors.New("the container did not exit after the call ended")
	}
	rep, oom, rerr := p.a.Outcome()
	if rerr == nil {
		x, err := driver.StubExit(rep)
		if err != nil {
			return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: %v", call.ID, err)
		}
		x.OOMKilled = oom || e.oomKilled(bg, call.Log, p.c.id)
		return x, nil
	}
	if errors.Is(rerr, stub.ErrMalformed) {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: %v", call.ID, rerr)
	}
	<-p.exited
	if suspicious(p.status, p.waitErr, copyErr) {
		if gone := e.engineGone(bg); gone != nil {
			return driver.Exit{}, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: the engine at %s went away during the call (an engine that stops kills its containers); the command's outcome is unknown: %w", call.ID, e.cli.DaemonHost(), gone)
		}
	}
	if p.waitErr != nil {
		return driver.Exit{}, unavailable(p.waitErr, "call %s: wait for the container", call.ID)
	}
	if errors.Is(rerr, stub.ErrNoPong) || p.status != 128+int64(syscall.SIGKILL) {
		// Not killed by us or the engine, and no report: the stub
		// failed.
		why := rerr.Error()
		if d := p.diag.String(); d != "" {
			why += " (stub: " + d + ")"
		}
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: status %d: %s", call.ID, p.status, why)
	}
	return driver.Exit{Status: int(p.status), Init: true, OOMKilled: oom || e.oomKilled(bg, call.Log, p.c.id)}, nil
}
