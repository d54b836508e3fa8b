package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// attached is a stub in attach mode outside a container: its stdin and
// stdout are the executor's stream.
type attached struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.Reader // the stub's stdout, unescaped
}

func startAttached(t *testing.T, c stub.Command, args ...string) *attached {
	t.Helper()
	a := &attached{cmd: exec.Command(stubBin, append([]string{stub.AttachArg}, args...)...)}
	a.cmd.Env = []string{}
	var err error
	if a.in, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.out = stub.NewUnescaper(stdout)
	if slices.Contains(args, stub.RawArg) {
		a.out = stdout
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.in.Close()
		_ = a.cmd.Process.Kill()
		_ = a.cmd.Wait()
	})
	// The executor's handshake: pings, each answered with a pong,
	// before the call.
	for range 2 {
		a.send(t, stub.FramePing, nil)
	}
	for i := range 2 {
		if f, err := stub.ReadFrame(a.out); err != nil || f.Kind != stub.FramePong || len(f.Data) != 0 {
			t.Fatalf("answer %d to a ping = %q %q, %v; want an empty pong", i, f.Kind, f.Data, err)
		}
	}
	msg, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.in.Write(msg); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *attached) send(t *testing.T, kind byte, data []byte) {
	t.Helper()
	if err := stub.WriteFrames(a.in, kind, data); err != nil {
		t.Fatalf("send frame %q: %v", kind, err)
	}
}

// outcome is what the stub sent until its final report.
type outcome struct {
	stdout, stderr string
	started        bool
	final          stub.Report
}

// read reads frames until the final report (within 10 s).
func (a *attached) read(t *testing.T) outcome {
	t.Helper()
	done := make(chan outcome, 1)
	errc := make(chan error, 1)
	go func() {
		var o outcome
		for {
			f, err := stub.ReadFrame(a.out)
			if err != nil {
				errc <- err
				return
			}
			switch f.Kind {
			case stub.FrameStdout:
				o.stdout += string(f.Data)
			case stub.FrameStderr:
				o.stderr += string(f.Data)
			case stub.FrameReport:
				r, err := stub.FrameReportValue(f)
				if err != nil {
					errc <- err
					return
				}
				if r.Kind == stub.Started {
					o.started = true
					continue
				}
				o.final = r
				done <- o
				return
			default:
				errc <- errors.New("unexpected frame kind " + string(f.Kind))
				return
			}
		}
	}()
	select {
	case o := <-done:
		return o
	case err := <-errc:
		t.Fatalf("reading frames: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no final report within 10s")
	}
	return outcome{}
}

func shCall(script string) stub.Command {
	return stub.Command{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin", "ONLY=this"}, Dir: "/", Deadline: time.Minute}
}

// TestAttachRunsCall: output of both streams in frames, the exit status
// in the final report, the call's environment and nothing else.
func TestAttachRunsCall(t *testing.T) {
	a := startAttached(t, shCall(`echo out; echo err >&2; env | sort; exit 3`))
	a.send(t, stub.FrameStdinEnd, nil)
	o := a.read(t)
	if !o.started || o.final.Kind != stub.Exited {
		t.Fatalf("reports: started %v, final %+v", o.started, o.final)
	}
	ws := syscall.WaitStatus(o.final.Value)
	if ws.Signaled() || ws.ExitStatus() != 3 {
		t.Errorf("wait status %#x, want exit 3", o.final.Value)
	}
	// sh adds PWD (and may add SHLVL, _); the stub adds nothing.
	if want := "out\nONLY=this\nPATH=/usr/bin:/bin\nPWD=/\n"; o.stdout != want && o.stdout != "out\nONLY=this\nPATH=/usr/bin:/bin\nPWD=/\nSHLVL=1\n" {
		t.Errorf("stdout = %q, want %q", o.stdout, want)
	}
	if o.stderr != "err\n" {
		t.Errorf("stderr = %q, want %q", o.stderr, "err\n")
	}
	// The stub waits for the executor to hang up after its report.
	a.in.Close()
	if err := a.cmd.Wait(); err == nil || a.cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("stub exit: %v, want status 3", err)
	}
}

// TestAttachRaw: with stub.RawArg the stub's stdout is not escaped: the
// frames are read straight, newlines and escape bytes as they are.
func TestAttachRaw(t *testing.T) {
	a := startAttached(t, shCall(`printf 'a\nb\376c\n'`), stub.RawArg)
	a.send(t, stub.FrameStdinEnd, nil)
	o := a.read(t)
	if o.stdout != "a\nb\xfec\n" || o.final.Kind != stub.Exited {
		t.Errorf("stdout %q, final %+v; want %q", o.stdout, o.final, "a\nb\xfec\n")
	}
}

// TestAttachStdin: the stdin frames reach the command in order, and its
// end is the command's end of file.
func TestAttachStdin(t *testing.T) {
	a := startAttached(t, stub.Command{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Deadline: time.Minute})
	a.send(t, stub.FrameStdin, []byte("hello "))
	a.send(t, stub.FrameStdin, []byte("world"))
	a.send(t, stub.FrameStdinEnd, nil)
	o := a.read(t)
	if o.stdout != "hello world" || o.final.Kind != stub.Exited || syscall.WaitStatus(o.final.Value).ExitStatus() != 0 {
		t.Errorf("stdout %q, final %+v", o.stdout, o.final)
	}
}

// TestAttachSignal: a signal frame reaches the command while its stdin
// is still open and unread.
func TestAttachSignal(t *testing.T) {
	a := startAttached(t, shCall(`echo ready; sleep 30`))
	a.send(t, stub.FrameStdin, make([]byte, 256<<10)) // never read
	f, err := stub.ReadFrame(a.out)
	for err == nil && f.Kind == stub.FrameReport {
		f, err = stub.ReadFrame(a.out)
	}
	if err != nil || f.Kind != stub.FrameStdout {
		t.Fatalf("first output frame: %v %+v", err, f)
	}
	a.send(t, stub.FrameSignal, stub.SignalFrame(int(syscall.SIGTERM)))
	o := a.read(t)
	ws := syscall.WaitStatus(o.final.Value)
	if o.final.Kind != stub.Exited || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("final %+v (signaled %v signal %v), want killed by SIGTERM", o.final, ws.Signaled(), ws.Signal())
	}
}

// TestAttachLifeline: when the executor's stream ends, the stub kills the
// command and exits at once.
func TestAttachLifeline(t *testing.T) {
	a := startAttached(t, shCall(`sleep 30`))
	f, err := stub.ReadFrame(a.out) // the started report
	if err != nil || f.Kind != stub.FrameReport {
		t.Fatalf("started report: %v %+v", err, f)
	}
	r, _ := stub.FrameReportValue(f)
	t0 := time.Now()
	a.in.Close()
	err = a.cmd.Wait()
	if time.Since(t0) > 2*time.Second {
		t.Errorf("the stub took %v to exit", time.Since(t0))
	}
	if err == nil || a.cmd.ProcessState.ExitCode() != statusKilled {
		t.Errorf("stub exit %v, want status %d", err, statusKilled)
	}
	commandGone(t, int(r.Value))
}

// commandGone fails the test unless the command pid is gone within 2 s
// (a zombie nobody waits for is reaped by init soon).
func commandGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %d) still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttachFailures: a command not found is a Failed report with 127
// and a message on the stderr frames; a deadline that passes is Expired.
func TestAttachFailures(t *testing.T) {
	a := startAttached(t, stub.Command{Argv: []string{"no-such-command-here"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Deadline: time.Minute})
	o := a.read(t)
	if o.final.Kind != stub.Failed || o.final.Value != statusNotFound || o.stderr == "" {
		t.Errorf("not found: final %+v stderr %q", o.final, o.stderr)
	}
	c := shCall(`sleep 30`)
	c.Deadline = 300 * time.Millisecond
	a = startAttached(t, c)
	o = a.read(t)
	if o.final.Kind != stub.Expired {
		t.Errorf("deadline: final %+v, want Expired", o.final)
	}
}

// TestAttachLifelineFIFO: with stub.LifelineArg, the end of the FIFO's
// writers kills the command and ends the stub although its stdin stays
// open; while the executor holds the FIFO, a call runs to its end.
func TestAttachLifelineFIFO(t *testing.T) {
	for _, drop := range []bool{false, true} {
		fifo := filepath.Join(t.TempDir(), "lifeline")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		// Read and write: the open does not wait for the stub.
		w, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		script := `echo ran`
		if drop {
			script = `sleep 30`
		}
		a := startAttached(t, shCall(script), stub.RawArg, stub.LifelineArg, fifo)
		if !drop {
			a.send(t, stub.FrameStdinEnd, nil)
			o := a.read(t)
			w.Close()
			if o.stdout != "ran\n" || o.final.Kind != stub.Exited {
				t.Errorf("with the lifeline held: stdout %q, final %+v", o.stdout, o.final)
			}
			continue
		}
		f, err := stub.ReadFrame(a.out) // the started report
		if err != nil || f.Kind != stub.FrameReport {
			t.Fatalf("started report: %v %+v", err, f)
		}
		r, _ := stub.FrameReportValue(f)
		w.Close() // the executor is gone; its stream (a.in) is not
		exited := make(chan error, 1)
		go func() { exited <- a.cmd.Wait() }()
		select {
		case err = <-exited:
		case <-time.After(10 * time.Second):
			t.Fatal("the stub still runs 10 s after its lifeline ended")
		}
		if err == nil || a.cmd.ProcessState.ExitCode() != statusKilled {
			t.Errorf("stub exit %v, want status %d", err, statusKilled)
		}
		commandGone(t, int(r.Value))
	}
}
