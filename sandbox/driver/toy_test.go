package driver_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// toy is the smallest backend: plain host processes, one process group
// per call, no isolation. It is all a new backend has to write; the
// driver does the rest (validation, env, session directories, capture,
// spill, redaction, supervision, exit decoding, cleanup, timings).
type toy struct {
	stateDir string
	detector redact.Detector // nil: none
}

// toyEnv is the toy's image environment (layer 1 of DESIGN §3.6).
var toyEnv = []string{"HOME=/tmp", "PATH=/usr/local/bin:/usr/bin:/bin"}

func (b *toy) Profile() driver.Profile {
	return driver.Profile{Name: "local", Service: driver.Service{StateDir: b.stateDir, Getenv: os.LookupEnv, KillGrace: time.Second, Detector: b.detector}}
}

func (b *toy) Resolve(_ context.Context, req *sandbox.Request) (driver.Resolution, struct{}, error) {
	if req.Terminal != nil {
		return driver.Resolution{}, struct{}{}, driver.NoTerminal("toy")
	}
	return driver.Resolution{
		ImageEnv: toyEnv,
		PathUID:  uint32(os.Geteuid()),
		Info:     sandbox.Info{Backend: "local", Image: "host", Policy: req.Policy.Name},
	}, struct{}{}, nil
}

func (b *toy) Prepare(_ context.Context, call *driver.Running, _ struct{}) (driver.Slot, error) {
	args := []string{"-c", call.Request.Command}
	if call.Request.Argv != nil {
		args = append([]string{"-c", `exec "$@"`, "bash"}, call.Request.Argv...)
	}
	cmd := exec.Command("bash", args...)
	cmd.Env = call.Env
	cmd.Dir = call.Workdir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second // a process that left the group may hold the output
	return &toyProcess{cmd: cmd, done: make(chan struct{})}, nil
}

// toyProcess is both the toy's container and its process.
type toyProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *toyProcess) ID() string { return "" }

func (p *toyProcess) Bind(_ context.Context, _ *driver.Running, s driver.Stdio) (driver.Process, error) {
	p.cmd.Stdout, p.cmd.Stderr = s.Stdout, s.Stderr
	var in *os.File
	if s.Stdin != nil {
		// A pipe of our own: Wait must not wait for a stdin that never
		// ends.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "toy: stdin: %w", err)
		}
		defer r.Close()
		p.cmd.Stdin, in = r, w
	}
	if err := p.cmd.Start(); err != nil {
		if in != nil {
			in.Close()
		}
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "toy: start: %w", err)
	}
	if in != nil {
		go func() {
			_, _ = io.Copy(in, s.Stdin)
			in.Close()
		}()
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *toyProcess) Done() <-chan struct{} { return p.done }

func (p *toyProcess) Signal(_ context.Context, sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *toyProcess) Wait(context.Context, bool) (driver.Exit, error) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // what the shell left
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) && !errors.Is(p.err, exec.ErrWaitDelay) {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "toy: wait: %w", p.err)
	}
	return driver.WaitExit(p.cmd.ProcessState.Sys().(syscall.WaitStatus), false), nil
}

// toyExecutor is the toy as a sandbox.Executor: one line.
type toyExecutor struct{ b *toy }

func (e toyExecutor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return driver.Run(ctx, e.b, req)
}

// toyPolicy is the built-in workspace-write policy, spelled out: the
// driver's tests do not import the policy package.
func toyPolicy() sandbox.Policy {
	return sandbox.Policy{
		Name:       "toy",
		Backend:    "local",
		Image:      "host",
		User:       "auto",
		Network:    "none",
		Workspace:  "rw",
		Transcript: "ro",
		Tmpfs:      []sandbox.Tmpfs{{Target: "/tmp"}},
	}
}

// TestToyConformance runs the conformance suite over the toy backend:
// every case that does not need isolation.
func TestToyConformance(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash is not installed: %v", err)
	}
	sandboxtest.Run(t, sandboxtest.Subject{
		New: func(t *testing.T) sandbox.Executor {
			return toyExecutor{&toy{stateDir: t.TempDir(), detector: calls.Detector{}}}
		},
		Policy:   toyPolicy(),
		ImageEnv: toyEnv,
	})
}
