// Package local is the sandbox backend without a container: it runs
// `bash -c` (or a request's exact argv, which bash only execs) directly on
// the host with exactly the environment that prepare.Call builds (never
// the service's own), in a process group of its own that a timeout or
// cancellation ends as a whole. It isolates
// nothing, so it runs only under a policy that says `backend: local`
// explicitly; it exists for trusted development and as the baseline of
// `dsh-sandbox bench` (DESIGN §3.8).
//
// Only cmd/dsh-sandbox and tests import this package. It imports sandbox,
// sandbox/driver (which runs its calls) and images.
package local

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// Options configure an Executor. Service.StateDir is required; every
// other zero field means the documented default.
type Options struct {
	// Service is the state directory (for the spill files of calls
	// without a session directory, StateDir/spill), logger, environment
	// and kill grace.
	driver.Service
	// Bash is the shell that runs commands; empty means "bash" on PATH.
	Bash string
}

// drainTimeout bounds how long output is still read after the command's
// shell and its process group are gone (a process that left the group can
// hold the pipes open).
const drainTimeout = 2 * time.Second

// Executor runs calls as host processes. Create one with New; the zero
// value is not usable. It is safe for concurrent use.
type Executor struct {
	opts Options
	bash string
}

var _ sandbox.Executor = (*Executor)(nil)

// New validates opts and finds bash.
func New(opts Options) (*Executor, error) {
	if opts.StateDir == "" || !filepath.IsAbs(opts.StateDir) {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "local: StateDir %q is not an absolute path", opts.StateDir)
	}
	bash := opts.Bash
	if bash == "" {
		bash = "bash"
	}
	path, err := exec.LookPath(bash)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "local: shell %q: %v", bash, err)
	}
	opts.Service = opts.Service.WithDefaults("backend", "local")
	return &Executor{opts: opts, bash: path}, nil
}

// BaseEnv is the base environment of a local call (layer 1 of DESIGN
// §3.6), the same as the host image's: the default PATH and HOME=/tmp.
func BaseEnv() []string {
	return []string{"HOME=/tmp", "PATH=" + images.DefaultPath}
}

// Run executes req as `bash -c` on the host through driver.Run. It
// refuses, as an invalid argument naming policy.backend, any policy that
// does not say "local", and a call on a terminal (Request.Terminal),
// which it cannot give.
func (e *Executor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return driver.Run(ctx, (*runner)(e), req)
}

// runner is the Executor as the driver sees it.
type runner Executor

func (b *runner) Profile() driver.Profile {
	return driver.Profile{
		Name:    "local",
		Service: b.opts.Service,
	}
}

// Resolve refuses what the local backend cannot enforce or give. The
// call runs on the host as this process.
func (b *runner) Resolve(_ context.Context, req *sandbox.Request) (driver.Resolution, struct{}, error) {
	if req.Policy.Network == policy.NetworkAllowlist {
		return driver.Resolution{}, struct{}{}, sandbox.Errorf(sandbox.ErrInvalid, "local: policy.network %q: the local backend has no network isolation to enforce it with; use backend oci or containerd", req.Policy.Network)
	}
	if req.Terminal != nil {
		return driver.Resolution{}, struct{}{}, driver.NoTerminal("local")
	}
	return driver.Resolution{
		ImageEnv: BaseEnv(),
		PathUID:  uint32(os.Geteuid()),
		Info:     sandbox.Info{Backend: "local", Image: images.HostName, Policy: req.Policy.Name},
	}, struct{}{}, nil
}

// Prepare has nothing to prepare: the call's process is its
// container, started by Bind.
func (b *runner) Prepare(_ context.Context, call *driver.Running, _ struct{}) (driver.Slot, error) {
	return &container{bash: b.bash, call: call}, nil
}

// container is a call not yet started.
type container struct {
	bash string
	call *driver.Running
}

func (c *container) ID() string { return "" }

// process is one running call.
type process struct {
	id      string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the shell has exited
	waitErr error
	copies  sync.WaitGroup
	readers []*os.File
}

// Bind starts bash in a new process group with the call's exact
// environment, its stdin fed from a pipe and its output copied into the
// captures.
func (c *container) Bind(_ context.Context, _ *driver.Running, stdio driver.Stdio) (driver.Process, error) {
	req, call := c.call.Request, c.call
	stdout, stderr := stdio.Stdout, stdio.Stderr
	internal := func(err error) error {
		return sandbox.Errorf(sandbox.ErrInternal, "local: call %s: %w", call.ID, err)
	}
	cmd := exec.Command(c.bash, "-c", req.Command)
	if req.Argv != nil {
		// The argv exactly: bash only execs it (a fixed script, no word
		// of the argv is parsed), looking Argv[0] up in the call's PATH
		// as the containers' init does.
		cmd = exec.Command(c.bash, append([]string{"-c", `exec "$@"`, "bash"}, req.Argv...)...)
	}
	cmd.Env = append([]string{}, call.Env...) // never the service's own
	cmd.Dir = call.Workdir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{id: call.ID, cmd: cmd, exited: make(chan struct{})}

	var parentEnds []*os.File // closed once the child has them
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	var inW *os.File
	stdinSrc := stdio.Stdin
	if stdinSrc != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, internal(err)
		}
		cmd.Stdin, inW = r, w
		parentEnds = append(parentEnds, r)
	}
	for _, dst := range []struct {
		w   io.Writer
		set func(*os.File)
	}{
		{stdout, func(f *os.File) { cmd.Stdout = f }},
		{stderr, func(f *os.File) { cmd.Stderr = f }},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(parentEnds)
			closeAll(p.readers)
			return nil, internal(err)
		}
		dst.set(w)
		parentEnds = append(parentEnds, w)
		p.readers = append(p.readers, r)
	}
	if err := cmd.Start(); err != nil {
		closeAll(parentEnds)
		closeAll(p.readers)
		if inW != nil {
			inW.Close()
		}
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "local: call %s: start %s: %v", call.ID, c.bash, err)
	}
	closeAll(parentEnds)
	if inW != nil {
		go func() {
			_, _ = io.Copy(inW, stdinSrc) // EPIPE when the command does not read it all
			inW.Close()
		}()
	}
	for i, w := range []io.Writer{stdout, stderr} {
		r := p.readers[i]
		p.copies.Add(1)
		go func() {
			defer p.copies.Done()
			_, _ = io.Copy(w, r)
		}()
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Done is closed when the shell has exited.
func (p *process) Done() <-chan struct{} { return p.exited }

// Signal sends sig to the call's whole process group.
func (p *process) Signal(_ context.Context, sig syscall.Signal) error {
	return p.signal(sig)
}

// Wait ends what is left of the call and reports how its shell ended:
// its own exit status, or the signal that killed it.
func (p *process) Wait(context.Context, bool) (driver.Exit, error) {
	p.finish()
	var exitErr *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &exitErr) {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrInternal, "local: call %s: wait: %w", p.id, p.waitErr)
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return driver.WaitExit(ws, false), nil
}

// signal sends sig to the call's whole process group.
func (p *process) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// finish ends what is left of the call once its shell has exited, as the
// end of a container would: SIGKILL to the rest of the process group,
// then the output up to drainTimeout.
func (p *process) finish() {
	_ = p.signal(syscall.SIGKILL)
	driver.Drain(&p.copies, drainTimeout, func() {
		for _, r := range p.readers {
			r.Close()
		}
	})
	for _, r := range p.readers {
		r.Close()
	}
}
