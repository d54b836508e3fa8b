package stub

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// PingEvery is how often Attach pings the stub until a pong comes back;
// PingTimeout is how long it tries.
const (
	PingEvery   = 2 * time.Millisecond
	PingTimeout = 30 * time.Second
)

// ErrNoPong is the error of a call whose stub never answered a ping
// within PingTimeout (it is not running, or not in attach mode, or of
// another version).
var ErrNoPong = errors.New("the stub did not answer within " + PingTimeout.String() + " (is it the same version, started with " + AttachArg + "?)")

// ErrNoReport is the error of a call whose stream ended before the
// stub's final report: the call's outcome is unknown.
var ErrNoReport = errors.New("the stream ended without the stub's final report")

// Attached is the executor's side of one call on a stub in attach mode
// (the Docker engine's and containerd's containers; package kubernetes
// has its own over a pod's attach stream). The stub's stdin stays open
// until Hangup: its end is the call's lifeline, so a supervisor that
// dies ends the call.
type Attached struct {
	inMu      sync.Mutex // held by each write to in
	in        io.WriteCloser
	hangup    sync.Once
	hangupErr error

	ready     chan struct{} // closed at the stub's first pong
	readyOnce sync.Once
	sent      chan struct{} // closed once the call message is written (or failed to be)
	done      chan struct{} // closed when the decoding of the stub's stdout ends
	pingLost  atomic.Bool

	// Set before done is closed.
	report *Report
	oom    bool
	err    error
}

// Attach binds call (an encoded Call) to the stub whose stdin is in and
// whose stdout, unescaped (NewUnescaper, unless the stub runs with
// RawArg), is out: it pings until the stub answers, sends
// the call message, then stdin (nil: empty) as frames and the end of
// the stdin; it writes the command's output to stdout and stderr as the
// frames come. Done is closed at the stub's final report or the end of
// out.
func Attach(in io.WriteCloser, out io.Reader, call []byte, stdin io.Reader, stdout, stderr io.Writer) *Attached {
	a := &Attached{
		in:    in,
		ready: make(chan struct{}),
		sent:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go a.decode(out, stdout, stderr)
	go a.feed(call, stdin)
	return a
}

// feed pings the stub until its pong shows that its stdout reaches the
// executor (FramePing), then writes the call message and the stdin.
func (a *Attached) feed(call []byte, stdin io.Reader) {
	tick := time.NewTicker(PingEvery)
	defer tick.Stop()
	giveUp := time.NewTimer(PingTimeout)
	defer giveUp.Stop()
	for ready := false; !ready; {
		if a.frame(FramePing, nil) != nil {
			close(a.sent)
			return
		}
		select {
		case <-a.ready:
			ready = true
		case <-a.done:
			close(a.sent)
			return
		case <-giveUp.C:
			a.pingLost.Store(true)
			close(a.sent)
			_ = a.Hangup()
			return
		case <-tick.C:
		}
	}
	a.inMu.Lock()
	_, err := a.in.Write(call)
	a.inMu.Unlock()
	close(a.sent)
	if err != nil {
		return
	}
	if stdin != nil {
		buf := make([]byte, 32<<10)
		for {
			n, rerr := stdin.Read(buf)
			if n > 0 && a.frame(FrameStdin, buf[:n]) != nil {
				return
			}
			if rerr != nil {
				break
			}
		}
	}
	_ = a.frame(FrameStdinEnd, nil)
}

func (a *Attached) frame(kind byte, data []byte) error {
	a.inMu.Lock()
	defer a.inMu.Unlock()
	return WriteFrames(a.in, kind, data)
}

// decode reads the stub's frames until its final report or the end of
// its stdout.
func (a *Attached) decode(r io.Reader, stdout, stderr io.Writer) {
	defer close(a.done)
	for {
		f, err := ReadFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				a.err = err
			}
			return
		}
		switch f.Kind {
		case FrameStdout:
			_, _ = stdout.Write(f.Data)
		case FrameStderr:
			_, _ = stderr.Write(f.Data)
		case FrameOOM:
			a.oom = true
		case FramePong:
			a.readyOnce.Do(func() { close(a.ready) })
		case FrameReport:
			rep, err := FrameReportValue(f)
			if err != nil {
				a.err = err
				return
			}
			if rep.Kind == Started {
				continue
			}
			a.report = &rep
			return
		default:
			a.err = fmt.Errorf("%w: unknown frame kind %q from the stub", ErrMalformed, f.Kind)
			return
		}
	}
}

// Done is closed once the stub's final report came or its stdout ended.
func (a *Attached) Done() <-chan struct{} { return a.done }

// Signal sends signal sig to every process of the call, through the
// stub, once the call message is sent (the stub reads nothing but pings
// before it); after the end of the call it does nothing. cancel stops
// the wait for the call message.
func (a *Attached) Signal(sig int, cancel <-chan struct{}) error {
	select {
	case <-a.sent:
	case <-a.done:
		return nil
	case <-cancel:
		return errors.New("cancelled before the call was sent")
	}
	select {
	case <-a.done:
		return nil
	default:
	}
	return a.frame(FrameSignal, SignalFrame(sig))
}

// Hangup closes the stub's stdin: a stub that reported the call's end
// exits, one whose call runs kills it. It does not wait for a write in
// progress (a stub that stopped reading would hold it up for good): in
// must allow Close concurrently with Write, as pipes and connections do.
// It is idempotent.
func (a *Attached) Hangup() error {
	a.hangup.Do(func() { a.hangupErr = a.in.Close() })
	return a.hangupErr
}

// Outcome returns, once Done is closed, the stub's final report (Exited,
// Failed or Expired) and whether the out-of-memory killer struck; a
// malformed stream is an error wrapping ErrMalformed, a stream that
// ended without a final report one wrapping ErrNoReport (or ErrNoPong
// when the stub never answered).
func (a *Attached) Outcome() (Report, bool, error) {
	<-a.done
	switch {
	case a.err != nil:
		return Report{}, a.oom, a.err
	case a.report != nil:
		return *a.report, a.oom, nil
	case a.pingLost.Load():
		return Report{}, a.oom, ErrNoPong
	}
	return Report{}, a.oom, ErrNoReport
}

// LimitedBuffer keeps the first Max bytes written to it (a stub's own
// stderr, for an error message) and drops the rest. It is safe for
// concurrent use.
type LimitedBuffer struct {
	Max int

	mu sync.Mutex
	b  []byte
}

func (l *LimitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.Max - len(l.b); n > 0 {
		l.b = append(l.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (l *LimitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
