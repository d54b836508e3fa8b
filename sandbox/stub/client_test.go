package stub

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// fakeStub plays the stub's side of attach mode over in (the executor's
// frames) and out (the stub's stdout, raw): it answers pings, reads the
// call, then runs script with the call and the frames that follow.
func fakeStub(t *testing.T, in io.Reader, out io.WriteCloser, script func(c *Command, in *bufio.Reader, out io.Writer)) {
	t.Helper()
	r := bufio.NewReader(in)
	go func() {
		defer out.Close()
		for {
			b, err := r.Peek(1)
			if err != nil {
				return
			}
			if b[0] != FramePing {
				break
			}
			if _, err := ReadFrame(r); err != nil {
				return
			}
			_ = WriteFrames(out, FramePong, nil)
		}
		c, err := ReadCall(r)
		if err != nil {
			return
		}
		script(c, r, out)
	}()
}

// attachPair binds call to a fake stub running script.
func attachPair(t *testing.T, stdin io.Reader, script func(c *Command, in *bufio.Reader, out io.Writer)) (*Attached, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	fakeStub(t, inR, outW, script)
	msg, err := (&Command{Argv: []string{"cat"}, Env: []string{"A=1"}, Dir: "/", Deadline: time.Minute}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	a := Attach(inW, outR, msg, stdin, &stdout, &stderr)
	t.Cleanup(func() { _ = a.Hangup(); inR.Close() })
	return a, &stdout, &stderr
}

func waitDone(t *testing.T, a *Attached) {
	t.Helper()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end within 10 s")
	}
}

// TestAttachClientRunsCall: the call message reaches the stub after the
// pong, then the stdin and its end; the output frames reach the
// writers, the final report is the outcome.
func TestAttachClientRunsCall(t *testing.T) {
	a, stdout, stderr := attachPair(t, strings.NewReader("hello"), func(c *Command, in *bufio.Reader, out io.Writer) {
		var got []byte
		for {
			f, err := ReadFrame(in)
			if err != nil || f.Kind == FrameStdinEnd {
				break
			}
			got = append(got, f.Data...)
		}
		_ = WriteFrames(out, FrameStdout, append([]byte(c.Argv[0]+":"), got...))
		_ = WriteFrames(out, FrameStderr, []byte(c.Env[0]))
		_ = WriteFrames(out, FrameOOM, nil)
		_ = WriteFrames(out, FrameReport, Report{Kind: Exited, Value: 3 << 8}.Encode())
	})
	waitDone(t, a)
	rep, oom, err := a.Outcome()
	if err != nil || rep.Kind != Exited || rep.Value != 3<<8 || !oom {
		t.Errorf("Outcome() = %+v, %v, %v; want Exited 3<<8, OOM", rep, oom, err)
	}
	if stdout.String() != "cat:hello" || stderr.String() != "A=1" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
}

// TestAttachClientLostStream: a stream that ends without the final
// report is ErrNoReport; a malformed one is ErrMalformed.
func TestAttachClientLostStream(t *testing.T) {
	a, _, _ := attachPair(t, nil, func(*Command, *bufio.Reader, io.Writer) {})
	waitDone(t, a)
	if _, _, err := a.Outcome(); !errors.Is(err, ErrNoReport) {
		t.Errorf("Outcome() of a lost stream = %v, want ErrNoReport", err)
	}
	a, _, _ = attachPair(t, nil, func(_ *Command, _ *bufio.Reader, out io.Writer) {
		_, _ = out.Write([]byte("garbage!"))
	})
	waitDone(t, a)
	if _, _, err := a.Outcome(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Outcome() of a malformed stream = %v, want ErrMalformed", err)
	}
}

// TestAttachClientSignalAndHangup: a signal frame reaches the stub after
// the call message; Hangup ends the stub's stdin.
func TestAttachClientSignalAndHangup(t *testing.T) {
	sig := make(chan int, 1)
	hungUp := make(chan struct{})
	stdin, stdinW := io.Pipe() // never ends: the signal comes first
	defer stdinW.Close()
	a, _, _ := attachPair(t, stdin, func(_ *Command, in *bufio.Reader, out io.Writer) {
		for {
			f, err := ReadFrame(in)
			if err != nil {
				close(hungUp)
				return
			}
			if f.Kind == FrameSignal {
				n, _ := FrameSignalNumber(f)
				sig <- n
				_ = WriteFrames(out, FrameReport, Report{Kind: Exited, Value: int32(n)}.Encode())
			}
		}
	})
	if err := a.Signal(15, nil); err != nil {
		t.Fatal(err)
	}
	if n := <-sig; n != 15 {
		t.Errorf("signal %d, want 15", n)
	}
	waitDone(t, a)
	_ = a.Hangup()
	select {
	case <-hungUp:
	case <-time.After(10 * time.Second):
		t.Error("the stub's stdin did not end after Hangup")
	}
}
