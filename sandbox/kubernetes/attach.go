package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/process"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// outputDrain bounds how long the attach stream may trail the stub's
// last report.
const outputDrain = 5 * time.Second

// pingEvery is how often the executor pings the stub until a pong
// comes back; pingTimeout is how long it tries.
const (
	pingEvery   = 2 * time.Millisecond
	pingTimeout = 30 * time.Second
)

// podContainer is a call's running pod, attached and answering, before
// the call is bound.
type podContainer struct {
	call *driver.Running
	p    *podProcess
}

func (c *podContainer) ID() string { return c.p.name }

// attach opens the attach stream of the stub in pod name and pings the
// stub until its pong shows that its stdout reaches us (stub.FramePing):
// after it, binding a call is one write on an open stream, with no
// request to the API server. It fails when no pong comes within
// pingTimeout or ctx ends first; the stream is closed then.
func (e *Executor) attach(ctx context.Context, name string) (*podProcess, error) {
	u := e.cli.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.opts.Namespace).Name(name).
		SubResource("attach").VersionedParams(&corev1.PodAttachOptions{
		Container: containerName, Stdin: true, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", u)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "kubernetes: pod %s: attach: %v", name, err)
	}
	// The stream outlives ctx: it is the bound call's, until Wait or
	// close ends it.
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &podProcess{
		e: e, name: name, in: inW, cancel: cancel,
		diag:     &stub.LimitedBuffer{Max: 4096},
		ready:    make(chan struct{}),
		bound:    make(chan struct{}),
		sent:     make(chan struct{}),
		done:     make(chan struct{}),
		streamed: make(chan error, 1),
		decoded:  make(chan struct{}),
	}
	go func() {
		err := ex.StreamWithContext(actx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: p.diag})
		outW.CloseWithError(io.EOF)
		inR.Close()
		p.streamed <- err
	}()
	go p.decode(stub.NewUnescaper(outR))
	go func() {
		<-p.decoded
		close(p.done)
	}()
	tick := time.NewTicker(pingEvery)
	defer tick.Stop()
	giveUp := time.NewTimer(pingTimeout)
	defer giveUp.Stop()
	for {
		if err := p.frame(stub.FramePing, nil); err != nil {
			p.close()
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: attach: %s", name, p.lost(err))
		}
		select {
		case <-p.ready:
			return p, nil
		case <-p.decoded:
			p.close()
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: attach: %s", name, p.lost(nil))
		case <-giveUp.C:
			p.close()
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: the stub did not answer within %v (is its stub the same version?)", name, pingTimeout)
		case <-ctx.Done():
			p.close()
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: attach: %w", name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Bind binds the call to the pod: it sends the call message (argv,
// environment, working directory, deadline) on the attached stream, then
// the stdin as frames; the output frames go to the captures as they
// come.
func (c *podContainer) Bind(ctx context.Context, _ *driver.Running, stdio driver.Stdio) (driver.Process, error) {
	call, req, p := c.call, c.call.Request, c.p
	msg := stub.Command{
		Argv:     process.InitArgs(req, call.Env),
		Env:      call.Env,
		Dir:      call.Workdir,
		Deadline: call.Timeout + p.e.opts.KillGrace + 2*time.Second,
	}
	b, err := msg.Encode()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: call %s: %v", call.ID, err)
	}
	p.call, p.stdio = call, stdio
	close(p.bound)
	// The stream stays open until the call ends (its end is the stub's
	// lifeline).
	go func() {
		err := p.send(b)
		close(p.sent)
		if err != nil {
			return
		}
		if src := stdio.Stdin; src != nil {
			buf := make([]byte, 32<<10)
			for {
				n, rerr := src.Read(buf)
				if n > 0 {
					if p.frame(stub.FrameStdin, buf[:n]) != nil {
						return
					}
				}
				if rerr != nil {
					break
				}
			}
		}
		_ = p.frame(stub.FrameStdinEnd, nil)
	}()
	return p, nil
}

// podProcess is a pod's attach stream, and the call bound to it.
type podProcess struct {
	e      *Executor
	name   string
	inMu   sync.Mutex
	in     *io.PipeWriter
	cancel context.CancelFunc
	diag   *stub.LimitedBuffer

	ready     chan struct{} // closed by decode at the stub's first pong
	bound     chan struct{} // closed by Bind once call and stdio are set
	sent      chan struct{} // closed once the call message is written (or failed to be)
	readyOnce sync.Once

	// Set by Bind before bound is closed.
	call  *driver.Running
	stdio driver.Stdio

	done     chan struct{} // closed once the outcome is known or lost
	decoded  chan struct{} // closed when decode returns
	streamed chan error    // the attach stream's end

	// Set by decode before decoded is closed.
	report   *stub.Report
	oom      bool
	protoErr error
}

// send writes raw bytes to the stub's stdin.
func (p *podProcess) send(b []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_, err := p.in.Write(b)
	return err
}

func (p *podProcess) frame(kind byte, data []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	return stub.WriteFrames(p.in, kind, data)
}

// close ends the stream of a pod no call was bound to: the stub sees its
// stdin end and exits.
func (p *podProcess) close() {
	p.in.Close()
	p.cancel()
}

// live says whether the stream still stands.
func (p *podProcess) live() bool {
	select {
	case <-p.decoded:
		return false
	default:
		return true
	}
}

// lost says why the stream ended (err: the write that found it closed),
// with the stream's error and what the stub said on its stderr.
func (p *podProcess) lost(err error) string {
	why := "the attach stream ended"
	select {
	case serr := <-p.streamed:
		p.streamed <- serr
		if serr != nil {
			err = serr
		}
	case <-time.After(outputDrain):
	}
	if err != nil {
		why += ": " + err.Error()
	}
	if d := p.diag.String(); d != "" {
		why += " (stub: " + d + ")"
	}
	return why
}

// decode reads the stub's frames until its final report or the end of
// the stream. Only pongs may come before a call is bound.
func (p *podProcess) decode(r io.Reader) {
	defer close(p.decoded)
	for {
		f, err := stub.ReadFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.protoErr = err
			}
			return
		}
		if f.Kind != stub.FramePong {
			select {
			case <-p.bound:
			default:
				p.protoErr = fmt.Errorf("%w: frame %q from the stub before its call", stub.ErrMalformed, f.Kind)
				return
			}
		}
		switch f.Kind {
		case stub.FrameStdout:
			_, _ = p.stdio.Stdout.Write(f.Data)
		case stub.FrameStderr:
			_, _ = p.stdio.Stderr.Write(f.Data)
		case stub.FrameOOM:
			p.oom = true
		case stub.FramePong:
			p.readyOnce.Do(func() { close(p.ready) })
		case stub.FrameReport:
			rep, err := stub.FrameReportValue(f)
			if err != nil {
				p.protoErr = err
				return
			}
			if rep.Kind == stub.Started {
				continue
			}
			p.report = &rep
			return
		default:
			p.protoErr = fmt.Errorf("%w: unknown frame kind %q from the stub", stub.ErrMalformed, f.Kind)
			return
		}
	}
}

func (p *podProcess) Done() <-chan struct{} { return p.done }

// Signal sends sig to every process of the call, through the stub, once
// the call message is sent: the stub reads nothing but pings before it.
func (p *podProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.sent:
	case <-p.decoded:
		return nil // the stream ended: nothing runs any more
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.frame(stub.FrameSignal, stub.SignalFrame(int(sig)))
}

// Wait reads the outcome the stub reported. A stream that ended without
// a final report (the pod or the cluster went away) is an
// ErrUnavailable error: the outcome is unknown.
func (p *podProcess) Wait(context.Context, bool) (driver.Exit, error) {
	call := p.call
	// The stub has reported, or the stream is gone: end the stream (its
	// stdin is the stub's lifeline). Everything the stub wrote before its
	// report was decoded before it; nothing follows it.
	if p.report != nil && p.protoErr == nil {
		p.close()
	} else {
		p.in.Close()
		defer p.cancel()
	}
	if p.protoErr != nil {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "kubernetes: call %s: pod %s: %v", call.ID, p.name, p.protoErr)
	}
	if p.report == nil {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: call %s: pod %s: %s without the stub's report", call.ID, p.name, p.lost(nil))
	}
	switch p.report.Kind {
	case stub.Exited:
		ws := syscall.WaitStatus(p.report.Value)
		x := driver.WaitExit(ws, true)
		x.OOMKilled = p.oom
		return x, nil
	case stub.Failed:
		return driver.Exit{Status: int(p.report.Value), Init: true}, nil
	case stub.Expired:
		return driver.Exit{Signal: syscall.SIGKILL}, nil
	}
	return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "kubernetes: call %s: unexpected stub report %q", call.ID, p.report.Kind)
}
