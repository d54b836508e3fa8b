// Package driver owns the lifecycle of one sandbox call, once for every
// backend: validation and a single sandbox.Prepare, the session
// directories (sandbox.PreparePaths), labels, output capture, spill and
// redaction (sandbox.Call.Captures), a cleanup stack run on every path on
// a context detached from the caller's, supervision (timeout,
// cancellation, kill grace: sandbox.Supervise), exit decoding, timings
// and the out-of-memory report. A backend implements only the primitives
// of Backend, Container and Process — resolve a request, create a
// prepared container, start it with the call's stdio, wait, signal —
// the way containerd's client drives its runtime shims through the Task
// interface; its Executor.Run is a call of Run.
//
// Backends (sandbox/oci, sandbox/docker, sandbox/containerd,
// sandbox/local) import this package; it imports sandbox only.
package driver

import (
	"cmp"
	"context"
	"io"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TeardownTimeout bounds the cleanup of one call; it runs on a context
// detached from the caller's, so it happens even when the caller gave up.
const TeardownTimeout = 30 * time.Second

// Config is what the driver needs to know about a backend; every
// backend's Config returns the same value for the executor's life.
type Config struct {
	// Name is the backend's name: the value of Policy.Backend it runs and
	// the prefix of its errors ("oci", "docker", …). Required.
	Name string
	// StateDir is the executor's state directory: spill files of calls
	// without a session directory go to StateDir/spill. Required.
	StateDir string
	// Getenv reads the service's environment for Policy.EnvInherit and
	// Policy.RedactEnv, at call time; nil means empty.
	Getenv func(string) (string, bool)
	// KillGrace is the time between SIGTERM and SIGKILL when a call is
	// stopped; 0 means sandbox.DefaultKillGrace.
	KillGrace time.Duration
	// Logger receives a debug event per call and teardown errors; the
	// zero value logs nothing.
	Logger zerolog.Logger
	// Instance is the executor's instance id in the containers' labels.
	Instance string
	// Reap names the command that removes what a failed teardown left,
	// quoted in the teardown error log ("dsh-sandbox reap --backend
	// docker"); empty means "dsh-sandbox reap".
	Reap string
}

// Target is what a backend resolved for one request before the call is
// prepared.
type Target struct {
	// ImageEnv is the base environment of the call's image (layer 1 of
	// DESIGN §3.6); nil means none.
	ImageEnv []string
	// PathUID is the host uid the call's accesses to host paths are
	// checked against and that may read the session directory
	// (sandbox.PreparePaths).
	PathUID uint32
	// Info is Result.Sandbox; ContainerID is filled from Container.ID.
	Info sandbox.Info
}

// Backend is one kind of sandbox, as the driver sees it. S is the
// backend's own per-call state, handed from Resolve to Create.
// Implementations are safe for concurrent use.
type Backend[S any] interface {
	// Config says how the driver runs the backend's calls.
	Config() Config
	// Resolve checks that the backend can run req (policy fields only it
	// knows: image, runtime, network, terminal) and resolves what the
	// call needs: the image's environment, the call's identity. It runs
	// after sandbox.Validate and before sandbox.Prepare; it creates
	// nothing that needs undoing.
	Resolve(ctx context.Context, req *sandbox.Request) (Target, S, error)
	// Create makes the call's container, ready to start but not started.
	// It pushes the undo of every step it finished onto call.Cleanup
	// (deleting the container last of all is the backend's "delete"),
	// which the driver runs on every path, also when Create fails.
	Create(ctx context.Context, call *Call, state S) (Container, error)
}

// Call is one prepared call as a backend sees it. The driver owns it;
// a backend keeps it until the call ends.
type Call struct {
	*sandbox.Call
	// Request is the call's request.
	Request *sandbox.Request
	// Labels are the container's labels (sandbox.Labels).
	Labels map[string]string
	// Log is the backend's logger with the call's fields.
	Log zerolog.Logger
	// Cleanup is the call's cleanup stack.
	Cleanup *Cleanup
	// Result is the call's result in the making; a backend may fill
	// Egress (also from a cleanup step). It is dropped when Run fails.
	Result *sandbox.Result

	failed error
}

// Fail makes Run return err instead of the call's result, unless Run
// fails anyway: a cleanup step calls it when it finds that the outcome
// of the call is unknown after all (its egress network broke down).
func (c *Call) Fail(err error) {
	if c.failed == nil {
		c.failed = err
	}
}

// Stdio is what a started process reads and writes.
type Stdio struct {
	// Stdout and Stderr are the call's captures; on a terminal, the
	// terminal's output goes to Stdout alone. A backend may read what
	// they hold with Stream (a runtime's own error message).
	Stdout, Stderr *sandbox.Capture
	// Stdin is the command's stdin; nil means an empty one.
	Stdin io.Reader
	// Terminal, when set, runs the command on a pseudo-terminal.
	Terminal *sandbox.Terminal
}

// Container is a created container.
type Container interface {
	// ID is the container's id in Result.Sandbox.ContainerID; "" when
	// the backend has none.
	ID() string
	// Start starts the container's process with stdio. Undo steps for
	// what it starts go onto the call's Cleanup.
	Start(ctx context.Context, stdio Stdio) (Process, error)
}

// Process is a started container process.
type Process interface {
	// Done is closed once the process has exited.
	Done() <-chan struct{}
	// Signal delivers sig to every process of the container. Its errors
	// are ignored: the container may be gone already.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Wait runs once Done is closed: it ends the output (waiting a
	// bounded time for it to drain), so that nothing writes to the
	// captures after it returns, and reports how the process ended.
	// stopped says the driver signalled it (timeout or cancellation). An
	// error means the sandbox failed or the outcome is unknown.
	Wait(ctx context.Context, stopped bool) (Exit, error)
}

// Exit is how a container's process ended.
type Exit struct {
	// Status is the exit status when Signal is 0.
	Status int
	// Signal is the signal that killed the process; 0 when it exited.
	Signal syscall.Signal
	// Init says Status comes from the container's init, which reports a
	// child killed by signal N as 128+N (sandbox.DecodeExitStatus).
	Init bool
	// OOMKilled says the out-of-memory killer struck in the container.
	OOMKilled bool
}

// WaitExit is the Exit of a host process that ended with ws: the signal
// that killed it, else its exit status; init says the process is (or
// exits with the status of) a container's init (Exit.Init). runc, crun
// and runsc exit with the container's status, which the init makes its
// child's; a runtime process killed by a signal itself is reported as
// that signal.
func WaitExit(ws syscall.WaitStatus, init bool) Exit {
	if ws.Signaled() {
		return Exit{Signal: ws.Signal(), Init: init}
	}
	return Exit{Status: ws.ExitStatus(), Init: init}
}

// decode returns the exit code and signal name of Result. A status
// 129–192 of an init naming a known signal is that signal with a nil
// exit code — which is also how a command that itself ends with `exit
// 137` is reported: the two are indistinguishable at the container's
// boundary, exactly as they are in a shell's $?.
func (x Exit) decode() (*int, string) {
	switch {
	case x.Signal != 0:
		return nil, sandbox.SignalName(x.Signal)
	case x.Init:
		return sandbox.DecodeExitStatus(x.Status)
	}
	code := x.Status
	return &code, ""
}

// Run executes req on backend b and returns when everything the call
// created is gone, whatever happened: this is every backend's
// Executor.Run. Errors follow sandbox.Executor.
func Run[S any](ctx context.Context, b Backend[S], req *sandbox.Request) (result *sandbox.Result, err error) {
	cfg := b.Config()
	t0 := time.Now()
	if req == nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: request is nil", cfg.Name)
	}
	if string(req.Policy.Backend) != cfg.Name {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: policy.backend %q: this executor runs only %q", cfg.Name, req.Policy.Backend, cfg.Name)
	}
	// A malformed request is refused before a daemon is asked anything.
	if err := sandbox.Validate(req); err != nil {
		return nil, err
	}
	tgt, state, err := b.Resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	sc, err := sandbox.Prepare(req, tgt.ImageEnv, cfg.Getenv)
	if err != nil {
		return nil, err
	}
	if err := sandbox.PreparePaths(req, sc, tgt.PathUID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, notStarted(cfg, sc.ID, ctx)
	}
	log := cfg.Logger.With().Str("call", sc.ID).Str("session", req.Session.ID).Logger()
	res := &sandbox.Result{TimeoutMs: sc.Timeout.Milliseconds(), Sandbox: tgt.Info}
	call := &Call{
		Call:    sc,
		Request: req,
		Labels:  sandbox.Labels(cfg.Instance, sc.ID, req.Session.ID, req.Labels),
		Log:     log,
		Cleanup: &Cleanup{},
		Result:  res,
	}
	// Everything Create and Start build is undone on every path, on a
	// context the caller's cancellation does not reach.
	bg := context.WithoutCancel(ctx)
	defer func() {
		t := time.Now()
		tctx, cancel := context.WithTimeout(bg, TeardownTimeout)
		defer cancel()
		if terr := call.Cleanup.Clean(tctx); terr != nil {
			// The outcome of the call is known; what is left is for
			// Reap. Say so loudly but keep the result.
			log.Error().Err(terr).Msgf("teardown left objects behind; `%s` removes them", cmp.Or(cfg.Reap, "dsh-sandbox reap"))
		}
		res.Timings.Teardown = time.Since(t)
		log.Debug().Dur("teardown", res.Timings.Teardown).Msg("call torn down")
		if call.failed != nil && err == nil {
			result, err = nil, call.failed
		}
	}()
	res.Timings.Prepare = time.Since(t0)

	t1 := time.Now()
	c, err := b.Create(ctx, call, state)
	if err != nil {
		return nil, err
	}
	res.Sandbox.ContainerID = c.ID()
	res.Timings.Create = time.Since(t1)
	if err := ctx.Err(); err != nil {
		return nil, notStarted(cfg, sc.ID, ctx)
	}

	t2 := time.Now()
	stdout, stderr := sc.Captures(cfg.StateDir, req.Stdout, req.Stderr)
	p, err := c.Start(ctx, Stdio{Stdout: stdout, Stderr: stderr, Stdin: req.StdinSource(), Terminal: req.Terminal})
	if err != nil {
		return nil, err
	}
	var lastSig syscall.Signal
	timedOut, aborted := sandbox.Supervise(ctx, sc.Timeout, cfg.KillGrace, p.Done(), func(sig syscall.Signal) error {
		log.Debug().Str("signal", sandbox.SignalName(sig)).Msg("stopping container")
		lastSig = sig
		return p.Signal(bg, sig)
	})
	<-p.Done()
	exit, werr := p.Wait(bg, timedOut || aborted)
	out, oerr := stdout.Stream()
	errOut, eerr := stderr.Stream()
	if oerr != nil || eerr != nil {
		log.Warn().AnErr("stdout", oerr).AnErr("stderr", eerr).Msg("spill file incomplete")
	}
	if werr != nil {
		return nil, werr
	}
	res.Stdout, res.Stderr = out, errOut
	res.TimedOut, res.Aborted = timedOut, aborted && !timedOut
	res.ExitCode, res.Signal = exit.decode()
	res.StoppedBy(lastSig)
	res.OOMKilled = exit.OOMKilled
	res.Timings.Run = time.Since(t2)
	log.Debug().Dur("run", res.Timings.Run).Msg("call finished")
	return res, nil
}

// notStarted is the error of a call whose caller gave up before it
// started.
func notStarted(cfg Config, id string, ctx context.Context) error {
	return sandbox.Errorf(sandbox.ErrUnavailable, "%s: call %s not started: %w", cfg.Name, id, context.Cause(ctx))
}
