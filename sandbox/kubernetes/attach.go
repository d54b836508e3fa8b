package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
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

// podContainer is a call's running pod, before the call is bound.
type podContainer struct {
	e    *Executor
	call *driver.Call
	name string
}

func (c *podContainer) ID() string { return c.name }

// Bind binds the call to the pod: it attaches to the stub's stdio and
// sends the call message (argv, environment, working directory,
// deadline), then the stdin as frames; the output frames go to the
// captures as they come.
func (c *podContainer) Bind(ctx context.Context, _ *driver.Call, stdio driver.Stdio) (driver.Process, error) {
	call, req := c.call, c.call.Request
	msg := stub.Call{
		Argv:     sandbox.InitArgs(req, call.Env),
		Env:      call.Env,
		Dir:      call.Workdir,
		Deadline: call.Timeout + c.e.opts.KillGrace + 2*time.Second,
	}
	b, err := msg.Encode()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: call %s: %v", call.ID, err)
	}
	u := c.e.cli.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.e.opts.Namespace).Name(c.name).
		SubResource("attach").VersionedParams(&corev1.PodAttachOptions{
		Container: containerName, Stdin: true, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewSPDYExecutor(c.e.cfg, "POST", u)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "kubernetes: call %s: attach: %v", call.ID, err)
	}
	bg := context.WithoutCancel(ctx)
	actx, cancel := context.WithCancel(bg)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	diag := &limitedBuffer{max: 4096}
	p := &podProcess{
		c: c, in: inW, cancel: cancel, diag: diag,
		ready:    make(chan struct{}),
		sent:     make(chan struct{}),
		done:     make(chan struct{}),
		streamed: make(chan error, 1),
		decoded:  make(chan struct{}),
	}
	go func() {
		err := ex.StreamWithContext(actx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: diag})
		outW.CloseWithError(io.EOF)
		inR.Close()
		p.streamed <- err
	}()
	go p.decode(stub.NewUnescaper(outR), stdio)
	// Pings until the stub's pong shows that its stdout reaches us
	// (stub.FramePing), then the call message, then the stdin; the
	// stream stays open until the call ends (its end is the stub's
	// lifeline).
	go func() {
		tick := time.NewTicker(pingEvery)
		defer tick.Stop()
		giveUp := time.After(pingTimeout)
	ping:
		for {
			if p.frame(stub.FramePing, nil) != nil {
				return
			}
			select {
			case <-p.ready:
				break ping
			case <-p.decoded:
				return
			case <-giveUp:
				p.pingLost.Store(true)
				p.cancel()
				return
			case <-tick.C:
			}
		}
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
	go func() {
		<-p.decoded
		close(p.done)
	}()
	return p, nil
}

// podProcess is a bound call.
type podProcess struct {
	c      *podContainer
	inMu   sync.Mutex
	in     *io.PipeWriter
	cancel context.CancelFunc
	diag   *limitedBuffer

	ready     chan struct{} // closed by decode at the stub's first pong
	sent      chan struct{} // closed once the call message is written (or failed to be)
	readyOnce sync.Once
	pingLost  atomic.Bool // no pong came within pingTimeout

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

// decode reads the stub's frames until its final report or the end of
// the stream.
func (p *podProcess) decode(r io.Reader, stdio driver.Stdio) {
	defer close(p.decoded)
	for {
		f, err := stub.ReadFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.protoErr = err
			}
			return
		}
		switch f.Kind {
		case stub.FrameStdout:
			_, _ = stdio.Stdout.Write(f.Data)
		case stub.FrameStderr:
			_, _ = stdio.Stderr.Write(f.Data)
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
	call := p.c.call
	// The stub is done: end the stream (its stdin is the lifeline).
	p.in.Close()
	var serr error
	select {
	case serr = <-p.streamed:
	case <-time.After(outputDrain):
		p.cancel()
		serr = <-p.streamed
	}
	p.cancel()
	if p.protoErr != nil {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "kubernetes: call %s: pod %s: %v", call.ID, p.c.name, p.protoErr)
	}
	if p.report == nil {
		why := "the attach stream ended without the stub's report"
		if p.pingLost.Load() {
			why = fmt.Sprintf("the stub did not answer within %v (is its stub the same version?)", pingTimeout)
		}
		if serr != nil {
			why += ": " + serr.Error()
		}
		if d := p.diag.String(); d != "" {
			why += " (stub: " + d + ")"
		}
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: call %s: pod %s: %s", call.ID, p.c.name, why)
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

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.max - len(l.b); n > 0 {
		l.b = append(l.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
