package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Backend is the backend name in policies and results.
const Backend = "docker"

// Options configure an Executor. StateDir is required; every other zero
// field means the documented default.
type Options struct {
	// Host is the engine's address ("unix:///var/run/docker.sock");
	// empty means DOCKER_HOST, else the engine's default socket.
	Host string
	// StateDir is an absolute directory owned by the service; spill files
	// of calls without a session directory go to StateDir/spill.
	StateDir string
	// InstanceID names this executor in labels; empty means a random
	// "i-<hex>". It must be 1–64 characters of [A-Za-z0-9_.-] starting
	// with a letter or digit.
	InstanceID string
	// Logger receives debug events per call and errors of teardown; the
	// zero value logs nothing. Env values are never logged.
	Logger zerolog.Logger
	// Getenv reads the service's environment for Policy.EnvInherit, at
	// call time; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// KillGrace is how long a timed-out or cancelled call has between
	// SIGTERM and SIGKILL; 0 means sandbox.DefaultKillGrace.
	KillGrace time.Duration
}

// teardownTimeout bounds the removal of one call's container; it runs on
// a context detached from the caller's.
const teardownTimeout = 30 * time.Second

// outputDrain bounds how long the output stream may trail the container's
// exit before the attach connection is closed.
const outputDrain = 10 * time.Second

// Executor runs each call in a new container of a Docker engine and
// removes it when the call ends. Create one with New; the zero value is
// not usable. An Executor is safe for concurrent use. Close releases it.
type Executor struct {
	opts     Options
	cli      *client.Client
	probe    *client.Client // never reuses a connection: see engineGone
	log      zerolog.Logger
	instance string
	lock     *os.File

	mu     sync.RWMutex // held for reading by every running call
	closed bool

	active sandbox.ActiveCalls // calls whose container Run still owns

	runtimesMu sync.Mutex
	runtimes   []string // the engine's runtimes when last asked; see checkRuntime

	importMu sync.Mutex // held by ImportRootfs

	remap  remap      // the engine's user namespace remapping, read by New
	nsMu   sync.Mutex // guards userns
	userns *os.File   // a user namespace with remap's maps, made on first use
}

var _ sandbox.Executor = (*Executor)(nil)

// New validates opts and connects to the engine: it pings the daemon,
// negotiates the API version and reads whether the engine remaps user
// namespaces, and with which map (userns.go; an engine restarted with
// another remapping needs a new Executor). An unreachable daemon, or one
// that remaps with a map the host's /etc/subuid and /etc/subgid do not
// tell, is an error wrapping sandbox.ErrUnavailable.
func New(ctx context.Context, opts Options) (*Executor, error) {
	var err error
	if opts.StateDir, opts.InstanceID, err = sandbox.CheckExecutorIdentity("docker", opts.StateDir, opts.InstanceID); err != nil {
		return nil, err
	}
	if opts.Getenv == nil {
		opts.Getenv = os.LookupEnv
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = sandbox.DefaultKillGrace
	}
	cli, err := newClient(opts.Host)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		_ = cli.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: engine at %s is not reachable: %w", cli.DaemonHost(), err)
	}
	cli.NegotiateAPIVersion(pctx)
	rm, err := engineRemap(pctx, cli)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	probe, err := newProbe(opts.Host)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		_ = cli.Close()
		_ = probe.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: state directory: %v", err)
	}
	e := &Executor{
		opts:     opts,
		cli:      cli,
		probe:    probe,
		log:      opts.Logger.With().Str("backend", Backend).Str("instance", opts.InstanceID).Logger(),
		instance: opts.InstanceID,
		remap:    rm,
	}
	if e.lock, err = sandbox.LockInstance(e.instancesDir(), e.instance); err != nil {
		err = fmt.Errorf("docker: %w", err)
		_ = cli.Close()
		_ = probe.Close()
		return nil, err
	}
	return e, nil
}

// newClient makes an engine client for host (empty: from the environment)
// that negotiates the API version with the daemon; extra options apply
// last.
func newClient(host string, extra ...client.Opt) (*client.Client, error) {
	o := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		o = append(o, client.WithHost(host))
	}
	cli, err := client.NewClientWithOpts(append(o, extra...)...)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: host %q: %w", host, err)
	}
	return cli, nil
}

// newProbe makes a client for host that opens a new connection for every
// request (see engineGone).
func newProbe(host string) (*client.Client, error) {
	// The option runs before the client wraps its transport for tracing,
	// while HTTPClient still shares the bare *http.Transport.
	return newClient(host, func(c *client.Client) error {
		t, ok := c.HTTPClient().Transport.(*http.Transport)
		if !ok {
			return fmt.Errorf("the client's transport is a %T, not an *http.Transport", c.HTTPClient().Transport)
		}
		t.DisableKeepAlives = true
		return nil
	})
}

// probeTimeout bounds engineGone's ping.
const probeTimeout = 5 * time.Second

// engineGone reports, as an error, that the engine does not accept new
// connections; nil means it answers. A stopping engine closes its
// listener first and then stops its containers (SIGTERM to pid 1, SIGKILL
// after the stop timeout), while requests on connections it already had
// are still served: the wait then reports a status the command never
// chose, and only a new connection tells the engine is going away.
func (e *Executor) engineGone(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := e.probe.Ping(pctx)
	return err
}

// callErr classifies err, which the engine returned for what during call
// id, as unavailable does; when the engine no longer accepts connections
// the error says that it went away.
func (e *Executor) callErr(ctx context.Context, err error, id, what string) error {
	if gone := e.engineGone(ctx); gone != nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: %s: the engine at %s went away during the call (%v): %w", id, what, e.cli.DaemonHost(), gone, err)
	}
	return unavailable(err, "call %s: %s", id, what)
}

// Instance returns the executor's instance id.
func (e *Executor) Instance() string { return e.instance }

// Close waits for running calls, closes the engine connection and
// releases the instance lock (StateDir/docker-instances/<id>.lock, which
// tells Reap the instance is live). Runs
// after Close fail with sandbox.ErrUnavailable. Close is idempotent.
func (e *Executor) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	err := errors.Join(e.cli.Close(), e.probe.Close())
	e.nsMu.Lock()
	if e.userns != nil {
		err = errors.Join(err, e.userns.Close())
		e.userns = nil
	}
	e.nsMu.Unlock()
	if e.lock != nil {
		err = errors.Join(err, os.Remove(e.lock.Name()), e.lock.Close())
		e.lock = nil
	}
	return err
}

// unavailable classifies an engine error: a daemon that cannot be reached
// is ErrUnavailable, a missing object ErrNotFound, anything else
// ErrInternal.
func unavailable(err error, format string, args ...any) error {
	class := sandbox.ErrInternal
	switch {
	case client.IsErrConnectionFailed(err), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		class = sandbox.ErrUnavailable
	case isNotFound(err):
		class = sandbox.ErrNotFound
	}
	return sandbox.Errorf(class, "docker: "+format+": %w", append(args, err)...)
}

// isNotFound reports whether the engine said the object does not exist.
// The client's errors match the containerd errdefs classes through Is;
// they have no NotFound method.
func isNotFound(err error) bool {
	return cerrdefs.IsNotFound(err)
}

// Run executes req in a new container and removes the container before
// returning, whatever happened. An engine that is down, or that goes away
// during the call and takes the container with it (it kills its
// containers when it stops), gives no Result and an error wrapping
// sandbox.ErrUnavailable: the command's outcome is unknown. A command
// that ended on its own is reported as usual even if the engine went
// away right after. A container whose removal failed because the engine
// was gone is left to Reap. A policy.runtime the engine has not
// registered is an ErrUnavailable error; Run never falls back to another
// runtime.
func (e *Executor) Run(ctx context.Context, req *sandbox.Request) (res *sandbox.Result, err error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: executor is closed")
	}
	t0 := time.Now()
	if req == nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: request is nil")
	}
	if req.Policy.Backend != Backend {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: policy.backend %q: this executor runs only %q", req.Policy.Backend, Backend)
	}
	if req.Policy.Image == "" || req.Policy.Image == "host" {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: policy.image %q: the host image exists only for the oci backend; import an image with `dsh-sandbox images import --backend docker`", req.Policy.Image)
	}
	if req.Policy.Network == policy.NetworkAllowlist {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: policy.network %q: the docker backend has no egress proxy yet; use backend oci or containerd", req.Policy.Network)
	}
	uid, gid, err := policy.ResolveUser(req.Policy, req.Session)
	if err != nil {
		return nil, err
	}
	user, err := e.remap.forCall(req.Policy, uid, gid)
	if err != nil {
		return nil, err
	}
	// Validate the request before asking the daemon anything.
	if _, err := sandbox.Prepare(req, nil, e.opts.Getenv); err != nil {
		return nil, err
	}
	mounts, err := policy.Mounts(req.Policy, req.Session, uid, gid)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call not started: %w", context.Cause(ctx))
	}
	if err := e.checkRuntime(ctx, req.Policy.Runtime); err != nil {
		return nil, err
	}
	imgEnv, err := e.imageEnv(ctx, req.Policy.Image)
	if err != nil {
		return nil, err
	}
	call, err := sandbox.Prepare(req, imgEnv, e.opts.Getenv)
	if err != nil {
		return nil, err
	}
	log := e.log.With().Str("call", call.ID).Str("session", req.Session.ID).Logger()
	res = &sandbox.Result{
		TimeoutMs: call.Timeout.Milliseconds(),
		Sandbox: sandbox.Info{
			Backend: Backend,
			Runtime: req.Policy.Runtime,
			Image:   req.Policy.Image,
			Policy:  req.Policy.Name,
		},
	}
	if err := sandbox.PreparePaths(req, call, uid); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s not started: %w", call.ID, context.Cause(ctx))
	}

	// From here on the container and the staging mounts are removed on
	// every path, on a context the caller's cancellation does not reach.
	bg := context.WithoutCancel(ctx)
	name := containerName(call.ID)
	// Reap leaves the container and its staging mounts alone until Run
	// is done with them.
	if !e.active.Add(call.ID) {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: callId %q is already running on this executor", call.ID)
	}
	defer e.active.Remove(call.ID)
	usernsFD := -1
	if user.idmapped {
		ns, err := e.usernsFile()
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: %w", call.ID, err)
		}
		usernsFD = int(ns.Fd())
	}
	binds, releaseBinds, err := e.stageBinds(call.ID, mounts, usernsFD)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: %w", call.ID, err)
	}
	// Deferred before the container's removal, so it runs after it.
	defer func() {
		if err := releaseBinds(); err != nil {
			log.Error().Err(err).Msg("teardown left staging mounts behind; `dsh-sandbox reap --backend docker` removes them")
		}
	}()
	cfg, hc, err := e.containerConfig(call, req, uid, gid, user, mounts, binds)
	if err != nil {
		return nil, err
	}
	res.Timings.Prepare = time.Since(t0)
	t1 := time.Now()
	created, err := e.cli.ContainerCreate(bg, cfg, hc, nil, nil, name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			// The name belongs to another executor's call: not ours to
			// remove.
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: callId %q: a container named %q already exists in the engine: %w", call.ID, name, err)
		}
		// A create that failed may still have left the container.
		e.remove(bg, log, name, res)
		return nil, e.callErr(bg, err, call.ID, "create container")
	}
	res.Sandbox.ContainerID = created.ID
	defer e.remove(bg, log, created.ID, res)
	res.Timings.Create = time.Since(t1)

	t2 := time.Now()
	if err := e.runContainer(ctx, log, call, req, created.ID, res); err != nil {
		return nil, err
	}
	res.Timings.Run = time.Since(t2)
	log.Debug().Dur("run", res.Timings.Run).Msg("call finished")
	return res, nil
}

// remove deletes the container (forcibly: it may still run) and records
// the teardown time. A failure is logged: the outcome of the call is
// known, and Reap removes what is left.
func (e *Executor) remove(ctx context.Context, log zerolog.Logger, id string, res *sandbox.Result) {
	t := time.Now()
	tctx, cancel := context.WithTimeout(ctx, teardownTimeout)
	defer cancel()
	err := e.cli.ContainerRemove(tctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isNotFound(err) {
		log.Error().Err(err).Str("container", id).Msg("teardown left the container behind; `dsh-sandbox reap --backend docker` removes it")
	}
	if res != nil {
		res.Timings.Teardown = time.Since(t)
	}
}

// containerName is the engine's name for a call's container.
func containerName(callID string) string { return "dsh-sandbox-" + callID }

// imageEnv returns the environment of the engine's image name.
func (e *Executor) imageEnv(ctx context.Context, name string) ([]string, error) {
	if _, err := canonicalImage("policy.image", name); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	img, err := e.cli.ImageInspect(ictx, name)
	if err != nil {
		if isNotFound(err) {
			return nil, sandbox.Errorf(sandbox.ErrNotFound, "docker: policy.image %q: not in the engine; import it with `dsh-sandbox images import --backend docker`: %w", name, err)
		}
		return nil, unavailable(err, "policy.image %q: inspect", name)
	}
	if img.Config == nil {
		return nil, nil
	}
	return img.Config.Env, nil
}

// containerConfig maps the call onto the engine's container
// configuration. The mapping keeps the oci backend's shape:
//   - tmpfs mounts carry the policy's options plus "exec" (the engine
//     adds noexec otherwise) and an explicit uid/gid for /tmp;
//   - binds are non-recursive and private, and come from the staging
//     mounts of stageBinds (binds, one per bind of ms, in order), which
//     carry nosuid, nodev and, per the policy, noexec and read-only: the
//     engine binds them read-write so that the runtime does not remount
//     them and drop those flags (see binds.go);
//   - the masked and read-only /proc and /sys paths are the policy's
//     (policy.WithMaskedPaths), and so is the seccomp profile
//     (policy.DefaultSeccompJSON, the one the oci and containerd
//     backends install), not the engine's default; the engine's defaults
//     supply the device allow-list;
//   - the call has a cgroup namespace of its own, as on the other
//     backends (policy.WithNamespaces);
//   - user (forCall) chooses the seccomp profile and, for user:
//     host-root or runsc on an engine that remaps, the host's user
//     namespace.
func (e *Executor) containerConfig(call *sandbox.Call, req *sandbox.Request, uid, gid uint32, user callUser, ms []specs.Mount, binds []stagedBind) (*container.Config, *container.HostConfig, error) {
	p := req.Policy
	l := p.Limits
	mem := l.MemoryBytes
	if mem == 0 {
		mem = 1 << 30
	}
	cpus := l.CPUs
	if cpus == 0 {
		cpus = 1
	}
	pids := l.Pids
	if pids == 0 {
		pids = 256
	}
	labels := sandbox.Labels(e.instance, call.ID, req.Session.ID, req.Labels)
	// When the engine stops the container itself (a daemon shutting
	// down, `docker stop`), it gives the same grace as a timeout does.
	stopTimeout := int((e.opts.KillGrace + time.Second - 1) / time.Second)
	cfg := &container.Config{
		Hostname:        policy.Hostname,
		User:            strconv.FormatUint(uint64(uid), 10) + ":" + strconv.FormatUint(uint64(gid), 10),
		Env:             call.Env,
		Cmd:             sandbox.InitArgs(req, call.Env),
		Entrypoint:      []string{},
		WorkingDir:      call.Workdir,
		Image:           p.Image,
		Labels:          labels,
		NetworkDisabled: true,
		AttachStdout:    true,
		AttachStderr:    true,
		StopTimeout:     &stopTimeout,
		// The init traps SIGTERM, so a stop by the engine always ends in
		// SIGKILL after the grace (see suspicious); an image's own
		// STOPSIGNAL must not change that.
		StopSignal: "SIGTERM",
	}
	if req.StdinSource() != nil {
		cfg.AttachStdin, cfg.OpenStdin, cfg.StdinOnce = true, true, true
	}
	masked, readonly := procPaths()
	hc := &container.HostConfig{
		MaskedPaths:    masked,
		ReadonlyPaths:  readonly,
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + user.seccomp},
		CgroupnsMode:   container.CgroupnsModePrivate,
		Runtime:        p.Runtime,
		Tmpfs:          map[string]string{},
		IpcMode:        "private",
		UsernsMode:     usernsMode(user),
		// No log driver: the engine's default (json-file) writes every
		// line of output as a JSON record to disk, which made 200 MB of
		// output take ~50 s instead of ~5 s and kept the command's
		// output on the daemon's disk. The attach stream is all we read.
		LogConfig: container.LogConfig{Type: "none"},
		Resources: container.Resources{
			Memory:     mem,
			MemorySwap: mem,
			NanoCPUs:   int64(cpus * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: policy.NofileSoft, Hard: policy.NofileHard},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	withTerminal(cfg, hc, req.Terminal)
	for _, m := range ms {
		switch m.Type {
		case "tmpfs":
			opts := append([]string{"rw", "exec"}, m.Options...)
			if !hasOption(opts, "uid=") {
				opts = append(opts, "uid=0", "gid=0")
			}
			hc.Tmpfs[m.Destination] = strings.Join(opts, ",")
		case "bind":
			if len(binds) == 0 || binds[0].Target != m.Destination {
				return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: mount %q was not staged", call.ID, m.Destination)
			}
			b := binds[0]
			binds = binds[1:]
			hc.Mounts = append(hc.Mounts, mount.Mount{
				Type:   mount.TypeBind,
				Source: b.Source,
				Target: b.Target,
				// Read-only comes with the staging mount: a read-only
				// bind would be remounted by the runtime, which drops
				// nosuid, nodev and noexec.
				ReadOnly: false,
				BindOptions: &mount.BindOptions{
					Propagation:  mount.PropagationRPrivate,
					NonRecursive: true,
				},
			})
		default:
			return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: call %s: mount %q of type %q is not supported", call.ID, m.Destination, m.Type)
		}
	}
	return cfg, hc, nil
}

// procPaths are the policy's masked and read-only /proc and /sys paths,
// which every container gets exactly (the engine's defaults lack some,
// e.g. /proc/interrupts). Computed once; callers must not modify them.
var procPaths = sync.OnceValues(func() (masked, readonly []string) {
	s := &specs.Spec{}
	_ = policy.WithMaskedPaths()(s) // cannot fail: it only fills s.Linux
	return s.Linux.MaskedPaths, s.Linux.ReadonlyPaths
})

func hasOption(opts []string, prefix string) bool {
	for _, o := range opts {
		if strings.HasPrefix(o, prefix) {
			return true
		}
	}
	return false
}

// runContainer attaches to the created container, starts it, streams its
// output into the call's captures, supervises it and fills res.
func (e *Executor) runContainer(ctx context.Context, log zerolog.Logger, call *sandbox.Call, req *sandbox.Request, id string, res *sandbox.Result) error {
	bg := context.WithoutCancel(ctx)
	stdout, stderr := call.Captures(e.opts.StateDir, req.Stdout, req.Stderr)

	// Attach before start so that no output is lost, and wait for the
	// next exit before start so that the exit is not missed either.
	hj, err := e.cli.ContainerAttach(bg, id, container.AttachOptions{
		Stream: true,
		Stdin:  req.StdinSource() != nil,
		Stdout: true,
		Stderr: true,
	})
	if err != nil {
		return e.callErr(bg, err, call.ID, "attach")
	}
	defer hj.Close()
	wctx, wcancel := context.WithCancel(bg)
	defer wcancel()
	waitC, waitErrC := e.cli.ContainerWait(wctx, id, container.WaitConditionNextExit)

	copied := make(chan error, 1)
	go func() {
		copied <- copyOutput(stdout, stderr, hj.Reader, req.Terminal != nil)
	}()
	var copyErr error

	if err := ctx.Err(); err != nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s not started: %w", call.ID, context.Cause(ctx))
	}
	if err := e.cli.ContainerStart(bg, id, container.StartOptions{}); err != nil {
		return e.callErr(bg, err, call.ID, "start container")
	}
	if src := req.StdinSource(); src != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, src) // fails once the attach is closed
			if req.Terminal == nil {
				// On a terminal the engine would close the terminal
				// itself: there, end of input is a key, ^D.
				_ = hj.CloseWrite()
			}
		}()
	}

	done := make(chan struct{})
	var status int64
	var waitErr error
	go func() {
		defer close(done)
		select {
		case w := <-waitC:
			status = w.StatusCode
			if w.Error != nil && w.Error.Message != "" {
				waitErr = errors.New(w.Error.Message)
			}
		case err := <-waitErrC:
			waitErr = err
		}
	}()
	go e.followTerminal(bg, id, req.Terminal, done)
	var lastSig syscall.Signal
	timedOut, aborted := sandbox.Supervise(ctx, call.Timeout, e.opts.KillGrace, done, func(sig syscall.Signal) error {
		log.Debug().Str("signal", sandbox.SignalName(sig)).Msg("stopping container")
		lastSig = sig
		return e.signal(bg, id, sig)
	})
	<-done

	// The stream ends when the container's output does; give it a
	// moment after the exit, then cut it.
	drain := time.NewTimer(outputDrain)
	select {
	case copyErr = <-copied:
	case <-drain.C:
		log.Warn().Msg("output stream did not end after the container exited; closing it")
		hj.Close()
		<-copied
		copyErr = errors.New("the output stream did not end after the container exited")
	}
	drain.Stop()

	out, oerr := stdout.Stream()
	errOut, eerr := stderr.Stream()
	if oerr != nil || eerr != nil {
		log.Warn().AnErr("stdout", oerr).AnErr("stderr", eerr).Msg("spill file incomplete")
	}
	res.Stdout, res.Stderr = out, errOut
	res.TimedOut, res.Aborted = timedOut, aborted && !timedOut
	// An engine that shuts down kills its containers and reports their
	// status as if the command had died of SIGKILL (or breaks the wait
	// off): the outcome is then unknown, whatever status came. Only a
	// suspicious end needs the probe (see suspicious).
	if suspicious(status, waitErr, copyErr) {
		if gone := e.engineGone(bg); gone != nil {
			log.Debug().Err(gone).AnErr("wait", waitErr).AnErr("output", copyErr).Int64("status", status).Msg("the engine went away during the call")
			return sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: the engine at %s went away during the call (an engine that stops kills its containers); the command's outcome is unknown: %w", call.ID, e.cli.DaemonHost(), gone)
		}
	}
	if waitErr != nil {
		return unavailable(waitErr, "call %s: wait for the container", call.ID)
	}
	res.ExitCode, res.Signal = sandbox.DecodeExitStatus(int(status))
	res.StoppedBy(lastSig)
	res.OOMKilled = e.oomKilled(bg, log, id)
	return nil
}

// oomKilled asks the engine whether the out-of-memory killer struck in
// the (exited, not yet removed) container: the engine records every OOM
// event of the container's cgroup, not only one that kills pid 1. An
// engine that cannot answer leaves it false, logged.
func (e *Executor) oomKilled(ctx context.Context, log zerolog.Logger, id string) bool {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.cli.ContainerInspect(ictx, id)
	if err != nil || info.ContainerJSONBase == nil || info.State == nil {
		log.Warn().Err(err).Msg("could not ask the engine whether the call ran out of memory")
		return false
	}
	return info.State.OOMKilled
}

// suspicious reports whether a call's end may be the engine's doing
// rather than the command's: the wait failed, the output stream broke,
// or the status says pid 1 died of a signal or is one the engine made
// up (128 and above, or negative). An engine that stops sends the stop
// signal (SIGTERM) to pid 1 alone, which the init traps (sandbox.InitArgs),
// and SIGKILL after the stop timeout, so a container it stops ends with
// status 137; one that crashes breaks the wait off. A status below 128
// with an intact wait and stream is the command's own, even when the
// engine went away just after it: its outcome is known.
func suspicious(status int64, waitErr, copyErr error) bool {
	return waitErr != nil || copyErr != nil || status >= 128 || status < 0
}

// signal delivers sig to every process of the container: SIGKILL through
// the engine to pid 1, whose death ends the pid namespace; any other
// signal from inside, since the engine reaches pid 1 alone.
func (e *Executor) signal(ctx context.Context, id string, sig syscall.Signal) error {
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if sig == syscall.SIGKILL {
		return e.cli.ContainerKill(kctx, id, "KILL")
	}
	ex, err := e.cli.ContainerExecCreate(kctx, id, container.ExecOptions{
		Cmd: termAll,
	})
	if err != nil {
		return err
	}
	return e.cli.ContainerExecStart(kctx, ex.ID, container.ExecStartOptions{Detach: true})
}
