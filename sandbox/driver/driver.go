// Package driver owns the lifecycle of one sandbox call, once for every
// backend: validation and a single prepare.Call, the session
// directories (prepare.Paths), labels, output capture, spill and
// redaction (capture.ForCall), a cleanup stack run on every path on
// a context detached from the caller's, supervision (timeout,
// cancellation, kill grace: process.Supervise), exit decoding, timings
// and the out-of-memory report. A backend implements only the primitives
// of Backend, Slot and Process — resolve a request, prepare a slot (a
// container that runs and waits for its call), bind the call to it
// (argv, environment, working directory, stdio), wait, signal — the way
// containerd's client drives its runtime shims through the Task
// interface; its Executor.Run is a call of Run (RunGated, behind the
// Gate that its Close closes).
//
// Prepare and Bind are the seam of the warm pool: a backend that can
// prepare a slot before its call exists (the oci backend, whose slots run
// the stub of package sandbox/stub) offers prepared slots through Warm,
// and Run binds the call to one instead of preparing its own. The cold
// path prepares and binds at once: one lifecycle either way.
//
// Backends (sandbox/oci, sandbox/docker, sandbox/containerd,
// sandbox/local) import this package; it imports sandbox only.
package driver

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/capture"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/process"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals"
)

// TeardownTimeout bounds the cleanup of one call; it runs on a context
// detached from the caller's, so it happens even when the caller gave up.
const TeardownTimeout = 30 * time.Second

// Profile is what the driver needs to know about a backend; every
// backend's Profile returns the same value for the executor's life.
type Profile struct {
	// Service is the executor's, with the backend's defaults applied
	// (Service.WithDefaults, which a backend's New applies once; a nil
	// Getenv here means an empty environment); Logger carries the
	// backend's fields.
	Service
	// Name is the backend's name: the value of Policy.Backend it runs and
	// the prefix of its errors ("oci", "docker", …). Required.
	Name string
	// Instance is the executor's instance id in the containers' labels.
	Instance string
	// Reap names the command that removes what a failed teardown left,
	// quoted in the teardown error log ("dsh-sandbox reap --backend
	// docker"); empty means "dsh-sandbox reap".
	Reap string
}

// Resolution is what a backend resolved for one request before the call
// is prepared.
type Resolution struct {
	// ImageEnv is the base environment of the call's image (layer 1 of
	// DESIGN §3.6); nil means none.
	ImageEnv []string
	// PathUID is the host uid the call's accesses to host paths are
	// checked against and that may read the session directory
	// (prepare.Paths).
	PathUID uint32
	// Info is Result.Sandbox; ContainerID is filled from Container.ID.
	Info sandbox.Info
}

// Backend is one kind of sandbox, as the driver sees it. S is the
// backend's own per-call state, handed from Resolve to Prepare.
// Implementations are safe for concurrent use.
type Backend[S any] interface {
	// Profile says how the driver runs the backend's calls.
	Profile() Profile
	// Resolve checks that the backend can run req (policy fields only it
	// knows: image, runtime, network, terminal) and resolves what the
	// call needs: the image's environment, the call's identity. It runs
	// after prepare.Validate and before prepare.Call; it creates
	// nothing that needs undoing.
	Resolve(ctx context.Context, req *sandbox.Request) (Resolution, S, error)
	// Prepare makes the call's slot: as much of the container as can
	// exist before the call is bound to it (the oci backend: created and
	// started, its stub waiting; a backend that cannot run a stub:
	// created, with the call's command in it). It pushes the undo of
	// every step it finished onto call.Cleanup (deleting the container
	// last of all is the backend's "delete"), which the driver runs on
	// every path, also when Prepare fails.
	Prepare(ctx context.Context, call *Running, state S) (Slot, error)
}

// Warm is what a Backend that keeps prepared slots (PrepareSlot) adds:
// Run asks it for a slot before preparing one, tells it when a call
// started, and may hand it the call's teardown.
type Warm[S any] interface {
	// Take returns a prepared slot that fits call exactly (everything
	// the slot fixed is what call would have fixed), with the cleanup
	// stack that undoes it, and sandbox.PoolHit; else no slot and
	// sandbox.PoolMiss, or "" when call is not one the pool serves. It
	// may wait, within ctx, for a slot already being prepared. The slot
	// is the caller's alone.
	Take(ctx context.Context, call *Running, state S) (slot Slot, undo *Cleanup, pool string)
	// Started says call was bound and runs: the backend may prepare a
	// slot for the session's next call.
	Started(call *Running, state S)
	// Release may take over the teardown of a finished call (its
	// cleanup stack), to run it after Run returned, off the caller's
	// path; it reports whether it did. It must not for a call whose
	// teardown can still change its result (Running.Fail, Result.Egress).
	Release(call *Running, state S, teardown *Cleanup) bool
}

// PrepareSlot prepares, ahead of its call, a slot for a call like req:
// everything Run does before Bind, with a call id of its own. The
// returned stack undoes the slot; on error nothing is left.
func PrepareSlot[S any](ctx context.Context, b Backend[S], req *sandbox.Request) (Slot, *Cleanup, error) {
	cfg := b.Profile()
	tgt, state, err := b.Resolve(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	sc, err := prepare.Call(req, tgt.ImageEnv, cfg.Getenv, cfg.Detector)
	if err != nil {
		return nil, nil, err
	}
	if err := prepare.Paths(req, sc, tgt.PathUID); err != nil {
		return nil, nil, err
	}
	call := newCall(cfg, req, sc, &sandbox.Result{Sandbox: tgt.Info})
	slot, err := b.Prepare(ctx, call, state)
	if err != nil {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), TeardownTimeout)
		defer cancel()
		if terr := call.Cleanup.Clean(tctx); terr != nil {
			call.Log.Error(fmt.Sprintf("undoing a failed slot left objects behind; `%s` removes them", cmp.Or(cfg.Reap, "dsh-sandbox reap")), "error", terr)
		}
		return nil, nil, err
	}
	return slot, call.Cleanup.Release(), nil
}

// newCall is the driver's Running of sc.
func newCall(cfg Profile, req *sandbox.Request, sc *sandbox.Call, res *sandbox.Result) *Running {
	return &Running{
		Call:    sc,
		Request: req,
		Labels:  reap.Labels(cfg.Instance, sc.ID, req.Session.ID, req.Labels),
		Log:     cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("call", sc.ID, "session", req.Session.ID),
		Cleanup: &Cleanup{},
		Result:  res,
	}
}

// Running is one call the driver runs, as a backend sees it: the
// prepared sandbox.Call with its request, labels, logger, cleanup stack
// and result in the making. The driver owns it; a backend keeps it until
// the call ends.
type Running struct {
	*sandbox.Call
	// Request is the call's request.
	Request *sandbox.Request
	// Labels are the container's labels (reap.Labels).
	Labels map[string]string
	// Log is the backend's logger with the call's fields.
	Log *slog.Logger
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
func (c *Running) Fail(err error) {
	if c.failed == nil {
		c.failed = err
	}
}

// Stdio is what a started process reads and writes.
type Stdio struct {
	// Stdout and Stderr are the call's captures; on a terminal, the
	// terminal's output goes to Stdout alone. A backend may read what
	// they hold with Stream (a runtime's own error message).
	Stdout, Stderr *capture.Writer
	// Stdin is the command's stdin; nil means an empty one.
	Stdin io.Reader
	// Terminal, when set, runs the command on a pseudo-terminal.
	Terminal *sandbox.Terminal
}

// Slot is a prepared container waiting for its call.
type Slot interface {
	// ID is the container's id in Result.Sandbox.ContainerID; "" when
	// the backend has none.
	ID() string
	// Bind runs call in the slot with stdio: the command line, the
	// environment and the working directory are call's. Undo steps for
	// what it starts go onto call.Cleanup. A slot is bound at most once.
	Bind(ctx context.Context, call *Running, stdio Stdio) (Process, error)
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
	// child killed by signal N as 128+N (process.DecodeExitStatus).
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
		return nil, signals.Name(x.Signal)
	case x.Init:
		return process.DecodeExitStatus(x.Status)
	}
	code := x.Status
	return &code, ""
}

// Run executes req on backend b and returns when everything the call
// created is gone, whatever happened: this is every backend's
// Executor.Run. Errors follow sandbox.Executor.
func Run[S any](ctx context.Context, b Backend[S], req *sandbox.Request) (result *sandbox.Result, err error) {
	cfg := b.Profile()
	t0 := time.Now()
	tgt, state, sc, err := prepareCall(ctx, b, cfg, req)
	if err != nil {
		return nil, err
	}
	res := &sandbox.Result{TimeoutMs: sc.Timeout.Milliseconds(), Sandbox: tgt.Info}
	call := newCall(cfg, req, sc, res)
	log := call.Log
	warm, _ := b.(Warm[S])
	// Everything Prepare and Bind build is undone on every path, on a
	// context the caller's cancellation does not reach.
	bg := context.WithoutCancel(ctx)
	defer func() {
		if warm != nil && warm.Release(call, state, call.Cleanup.Release()) {
			return
		}
		tearDown(bg, cfg, call, log)
		if call.failed != nil && err == nil {
			result, err = nil, call.failed
		}
	}()
	res.Timings.Prepare = time.Since(t0)

	t1 := time.Now()
	slot, err := takeSlot(ctx, b, warm, call, state)
	if err != nil {
		return nil, err
	}
	res.Sandbox.ContainerID = slot.ID()
	res.Timings.Create = time.Since(t1)
	if err := ctx.Err(); err != nil {
		return nil, notStarted(cfg, sc.ID, ctx)
	}

	t2 := time.Now()
	stdout, stderr := capture.ForCall(sc, cfg.StateDir, req.Stdout, req.Stderr)
	p, err := slot.Bind(ctx, call, Stdio{Stdout: stdout, Stderr: stderr, Stdin: req.StdinSource(), Terminal: req.Terminal})
	if err != nil {
		return nil, err
	}
	res.Timings.Bind = time.Since(t2)
	if warm != nil {
		warm.Started(call, state)
	}
	if err := await(ctx, bg, cfg, call, log, p, stdout, stderr); err != nil {
		return nil, err
	}
	res.Timings.Run = time.Since(t2)
	log.Debug("call finished", "run", res.Timings.Run)
	return res, nil
}

// prepareCall checks req, resolves it on b (Backend.Resolve,
// prepare.Call) and prepares its host paths (prepare.Paths):
// everything Run does before it creates anything that needs undoing. It
// fails with notStarted when ctx is done by then.
func prepareCall[S any](ctx context.Context, b Backend[S], cfg Profile, req *sandbox.Request) (Resolution, S, *sandbox.Call, error) {
	var none S
	if req == nil {
		return Resolution{}, none, nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: request is nil", cfg.Name)
	}
	if string(req.Policy.Backend) != cfg.Name {
		return Resolution{}, none, nil, sandbox.Errorf(sandbox.ErrInvalid, "%s: policy.backend %q: this executor runs only %q", cfg.Name, req.Policy.Backend, cfg.Name)
	}
	// A malformed request is refused before a daemon is asked anything.
	if err := prepare.Validate(req); err != nil {
		return Resolution{}, none, nil, err
	}
	tgt, state, err := b.Resolve(ctx, req)
	if err != nil {
		return Resolution{}, none, nil, err
	}
	sc, err := prepare.Call(req, tgt.ImageEnv, cfg.Getenv, cfg.Detector)
	if err != nil {
		return Resolution{}, none, nil, err
	}
	if err := prepare.Paths(req, sc, tgt.PathUID); err != nil {
		return Resolution{}, none, nil, err
	}
	if err := ctx.Err(); err != nil {
		return Resolution{}, none, nil, notStarted(cfg, sc.ID, ctx)
	}
	return tgt, state, sc, nil
}

// tearDown runs the call's cleanup stack on a context bounded by
// TeardownTimeout, logs what it left behind and records how long it took.
func tearDown(bg context.Context, cfg Profile, call *Running, log *slog.Logger) {
	res := call.Result
	t := time.Now()
	tctx, cancel := context.WithTimeout(bg, TeardownTimeout)
	defer cancel()
	if terr := call.Cleanup.Clean(tctx); terr != nil {
		// The outcome of the call is known; what is left is for
		// Reap. Say so loudly but keep the result.
		log.Error(fmt.Sprintf("teardown left objects behind; `%s` removes them", cmp.Or(cfg.Reap, "dsh-sandbox reap")), "error", terr)
	}
	res.Timings.Teardown = time.Since(t)
	log.Debug("call torn down", "teardown", res.Timings.Teardown)
}

// takeSlot returns the call's slot: a prepared one of warm when it has
// one that fits (its undo joins the call's cleanup stack), else one b
// prepares. It records the pool's answer in the call's timings.
func takeSlot[S any](ctx context.Context, b Backend[S], warm Warm[S], call *Running, state S) (Slot, error) {
	var slot Slot
	if warm != nil {
		var undo *Cleanup
		slot, undo, call.Result.Timings.Pool = warm.Take(ctx, call, state)
		if slot != nil {
			call.Cleanup.Merge(undo)
		}
	}
	if slot == nil {
		return b.Prepare(ctx, call, state)
	}
	return slot, nil
}

// await supervises the bound process p until it ends (timeout,
// cancellation and kill grace: process.Supervise), waits for it on bg
// and fills the call's result with its output and how it ended; an
// error is Process.Wait's.
func await(ctx, bg context.Context, cfg Profile, call *Running, log *slog.Logger, p Process, stdout, stderr *capture.Writer) error {
	res := call.Result
	var lastSig syscall.Signal
	timedOut, aborted := process.Supervise(ctx, call.Timeout, cfg.KillGrace, p.Done(), func(sig syscall.Signal) error {
		log.Debug("stopping container", "signal", signals.Name(sig))
		lastSig = sig
		return p.Signal(bg, sig)
	})
	<-p.Done()
	exit, werr := p.Wait(bg, timedOut || aborted)
	out, oerr := stdout.Stream()
	errOut, eerr := stderr.Stream()
	if oerr != nil || eerr != nil {
		log.Warn("spill file incomplete", "stdout", oerr, "stderr", eerr)
	}
	if werr != nil {
		return werr
	}
	res.Stdout, res.Stderr = out, errOut
	res.TimedOut, res.Aborted = timedOut, aborted && !timedOut
	res.ExitCode, res.Signal = exit.decode()
	res.StoppedBy(lastSig)
	res.OOMKilled = exit.OOMKilled
	return nil
}

// notStarted is the error of a call whose caller gave up before it
// started.
func notStarted(cfg Profile, id string, ctx context.Context) error {
	return sandbox.Errorf(sandbox.ErrUnavailable, "%s: call %s not started: %w", cfg.Name, id, context.Cause(ctx))
}
