package process

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// helperEnv selects a fake child behaviour when the test binary is
// re-executed (os/exec's helper-process pattern).
const helperEnv = "SANDBOX_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Hour)
		os.Exit(4)
	case "default-term":
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Hour)
		os.Exit(4)
	default:
		os.Exit(3)
	}
}

type sent struct {
	sig syscall.Signal
	at  time.Duration // since the start of the bubble
}

// fakeContainer records signals and ends (closes done) when it receives
// one of endOn.
type fakeContainer struct {
	start time.Time
	done  chan struct{}
	endOn []syscall.Signal
	err   error // returned by every signal
	sent  []sent
}

func newFake(endOn ...syscall.Signal) *fakeContainer {
	return &fakeContainer{start: time.Now(), done: make(chan struct{}), endOn: endOn}
}

func (f *fakeContainer) signal(sig syscall.Signal) error {
	f.sent = append(f.sent, sent{sig, time.Since(f.start)})
	if len(f.sent) > 10 {
		// A broken Supervise that never escalates must fail, not spin.
		f.endOn = append(f.endOn[:0], sig)
	}
	if i := slices.Index(f.endOn, sig); i >= 0 {
		f.endOn = slices.Delete(f.endOn, i, i+1)
		if !slices.Contains(f.endOn, sig) {
			select {
			case <-f.done:
			default:
				close(f.done)
			}
		}
	}
	return f.err
}

func TestSupervise(t *testing.T) {
	const (
		timeout = 10 * time.Second
		grace   = 2 * time.Second
	)
	tests := []struct {
		name         string
		timeout      time.Duration
		grace        time.Duration
		endOn        []syscall.Signal
		endAfter     time.Duration // the command exits on its own then; 0 = never
		cancelAfter  time.Duration // ctx is cancelled then; 0 = never
		signalErr    error
		want         []sent
		wantTimedOut bool
		wantAborted  bool
	}{
		{
			name: "finishes in time", timeout: timeout, grace: grace, endAfter: time.Second,
		},
		{
			name: "timeout, exits on TERM", timeout: timeout, grace: grace, endOn: []syscall.Signal{syscall.SIGTERM},
			want: []sent{{syscall.SIGTERM, timeout}}, wantTimedOut: true,
		},
		{
			name: "timeout, ignores TERM", timeout: timeout, grace: grace, endOn: []syscall.Signal{syscall.SIGKILL},
			want: []sent{{syscall.SIGTERM, timeout}, {syscall.SIGKILL, timeout + grace}}, wantTimedOut: true,
		},
		{
			name: "first KILL does not take, KILL is repeated", timeout: timeout, grace: grace,
			endOn: []syscall.Signal{syscall.SIGKILL, syscall.SIGKILL},
			want: []sent{
				{syscall.SIGTERM, timeout}, {syscall.SIGKILL, timeout + grace}, {syscall.SIGKILL, timeout + 2*grace},
			},
			wantTimedOut: true,
		},
		{
			name: "exits during grace", timeout: timeout, grace: grace, endAfter: timeout + time.Second,
			want: []sent{{syscall.SIGTERM, timeout}}, wantTimedOut: true,
		},
		{
			name: "signal errors are not fatal", timeout: timeout, grace: grace, endOn: []syscall.Signal{syscall.SIGKILL},
			signalErr: errors.New("container not running"),
			want:      []sent{{syscall.SIGTERM, timeout}, {syscall.SIGKILL, timeout + grace}}, wantTimedOut: true,
		},
		{
			name: "cancel before timeout", timeout: timeout, grace: grace, cancelAfter: time.Second,
			endOn: []syscall.Signal{syscall.SIGTERM},
			want:  []sent{{syscall.SIGTERM, time.Second}}, wantAborted: true,
		},
		{
			name: "no timeout: only cancel stops it", timeout: 0, grace: grace, cancelAfter: time.Hour,
			endOn: []syscall.Signal{syscall.SIGKILL},
			want:  []sent{{syscall.SIGTERM, time.Hour}, {syscall.SIGKILL, time.Hour + grace}}, wantAborted: true,
		},
		{
			name: "no timeout runs as long as it likes", timeout: -1, grace: grace, endAfter: 24 * time.Hour,
		},
		{
			name: "zero grace means the default", timeout: timeout, grace: 0, endOn: []syscall.Signal{syscall.SIGKILL},
			want: []sent{{syscall.SIGTERM, timeout}, {syscall.SIGKILL, timeout + sandbox.DefaultKillGrace}}, wantTimedOut: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(tt.endOn...)
				f.err = tt.signalErr
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tt.cancelAfter > 0 {
					time.AfterFunc(tt.cancelAfter, cancel)
				}
				if tt.endAfter > 0 {
					time.AfterFunc(tt.endAfter, func() { close(f.done) })
				}
				timedOut, aborted := Supervise(ctx, tt.timeout, tt.grace, f.done, f.signal)
				if timedOut != tt.wantTimedOut || aborted != tt.wantAborted {
					t.Errorf("Supervise() = timedOut %v, aborted %v, want %v, %v", timedOut, aborted, tt.wantTimedOut, tt.wantAborted)
				}
				if !slices.Equal(f.sent, tt.want) {
					t.Errorf("Supervise() sent %v, want %v", f.sent, tt.want)
				}
				select {
				case <-f.done:
				default:
					t.Errorf("Supervise() returned before done was closed")
				}
			})
		})
	}
}

func TestSuperviseAlreadyCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(syscall.SIGTERM)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		timedOut, aborted := Supervise(ctx, time.Second, time.Second, f.done, f.signal)
		if timedOut || !aborted || len(f.sent) != 1 || f.sent[0] != (sent{syscall.SIGTERM, 0}) {
			t.Errorf("Supervise(cancelled ctx) = %v, %v, sent %v, want false, true, [TERM at 0]", timedOut, aborted, f.sent)
		}
	})
}

// TestSuperviseRealProcess runs the test binary as a child that ignores
// or obeys SIGTERM and checks how it ended.
func TestSuperviseRealProcess(t *testing.T) {
	tests := []struct {
		helper string
		want   syscall.Signal
		sigs   []syscall.Signal
		// grace is the kill grace: long where the child must end on
		// SIGTERM alone, also on a loaded machine.
		grace time.Duration
	}{
		{"default-term", syscall.SIGTERM, []syscall.Signal{syscall.SIGTERM}, 10 * time.Second},
		{"ignore-term", syscall.SIGKILL, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.helper, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = []string{helperEnv + "=" + tt.helper}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait until the child has set up its signal handling.
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper said %q, %v, want ready", line, err)
			}
			done := make(chan struct{})
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(done) }()

			var sigs []syscall.Signal
			timedOut, aborted := Supervise(t.Context(), time.Millisecond, tt.grace, done, func(sig syscall.Signal) error {
				sigs = append(sigs, sig)
				if len(sigs) > 5 {
					sig = syscall.SIGKILL // a broken Supervise must fail, not hang
				}
				return cmd.Process.Signal(sig)
			})
			if !timedOut || aborted {
				t.Errorf("Supervise() = %v, %v, want timedOut", timedOut, aborted)
			}
			if !slices.Equal(sigs, tt.sigs) {
				t.Errorf("Supervise() sent %v, want %v", sigs, tt.sigs)
			}
			var ee *exec.ExitError
			if !errors.As(waitErr, &ee) {
				t.Fatalf("child ended with %v, want a signal", waitErr)
			}
			ws := ee.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != tt.want {
				t.Errorf("child ended with %v, want killed by %v", ws, tt.want)
			}
		})
	}
}
