package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/daemon"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/process"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Backend is the backend name in policies and results.
const Backend = "docker"

// Options configure an Executor. Service.StateDir is required; every
// other zero field means the documented default.
type Options struct {
	// Service is the state directory, logger, environment and kill
	// grace; spill files of calls without a session directory go to
	// StateDir/spill.
	driver.Service
	// Host is the engine's address ("unix:///var/run/docker.sock");
	// empty means DOCKER_HOST, else the engine's default socket.
	Host string
	// InstanceID names this executor in labels; empty means a random
	// "i-<hex>". It must be 1–64 characters of [A-Za-z0-9_.-] starting
	// with a letter or digit.
	InstanceID string
	// Network is how the egress proxy of a call of network allowlist
	// reaches the outside; the zero value is the host's resolver and
	// dialer (egress.Network).
	Network egress.Network
	// Stub is the static stub program (cmd/dsh-sandbox-stub), pid 1 of
	// every container but one on a terminal (stub.go); empty means
	// dsh-sandbox-stub next to the running executable, else on PATH
	// (stub.Locate). Without it, those calls fail with
	// sandbox.ErrUnavailable saying how to install it.
	Stub string
}

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
	instance string
	lock     *os.File

	gate driver.Gate // held by every running call; closed by Close

	active reap.ActiveCalls // calls whose container Run still owns

	runtimesMu sync.Mutex
	runtimes   []string // the engine's runtimes when last asked; see checkRuntime

	importMu sync.Mutex // held by ImportRootfs

	stub    string // the stub program's absolute path; "" when stubErr says why not
	stubErr error

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
	if opts.StateDir, opts.InstanceID, err = reap.CheckExecutorIdentity("docker", opts.StateDir, opts.InstanceID); err != nil {
		return nil, err
	}
	opts.Service = opts.Service.WithDefaults("backend", Backend, "instance", opts.InstanceID)
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
		instance: opts.InstanceID,
		remap:    rm,
	}
	e.stub, e.stubErr = stub.Locate(opts.Stub)
	if e.lock, err = reap.LockInstance(e.instancesDir(), e.instance); err != nil {
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
func (e *Executor) Close() error { return e.gate.Close(e.release) }

// release is Close once the calls ended.
func (e *Executor) release() error {
	err := errors.Join(e.cli.Close(), e.probe.Close())
	e.nsMu.Lock()
	if e.userns != nil {
		err = errors.Join(err, e.userns.Close())
		e.userns = nil
	}
	e.nsMu.Unlock()
	// The instance's egress FIFO directory: empty once its calls ended
	// (Close waits for them); a FIFO a failed teardown left keeps it for
	// Reap.
	_ = os.Remove(filepath.Join(e.opts.StateDir, "egress", e.instance))
	if e.lock != nil {
		err = errors.Join(err, os.Remove(e.lock.Name()), e.lock.Close())
		e.lock = nil
	}
	return err
}

// unavailable classifies an engine error with the one classifier
// (daemon.Error): a daemon that cannot be reached is
// ErrUnavailable, a missing object ErrNotFound, anything else
// ErrInternal.
func unavailable(err error, format string, args ...any) error {
	return daemon.Error(err, client.IsErrConnectionFailed, "docker: "+format, args...)
}

// isNotFound reports whether the engine said the object does not exist.
// The client's errors match the containerd errdefs classes through Is;
// they have no NotFound method.
func isNotFound(err error) bool {
	return cerrdefs.IsNotFound(err)
}

// Run executes req in a new container and removes the container before
// returning, whatever happened (driver.Run). An engine that is down, or
// that goes away during the call and takes the container with it (it
// kills its containers when it stops), gives no Result and an error
// wrapping sandbox.ErrUnavailable: the command's outcome is unknown. A
// command that ended on its own is reported as usual even if the engine
// went away right after. A container whose removal failed because the
// engine was gone is left to Reap. A policy.runtime the engine has not
// registered is an ErrUnavailable error; Run never falls back to another
// runtime.
func (e *Executor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return driver.RunGated(ctx, &e.gate, (*runner)(e), req)
}

// runner is the Executor as driver.Run sees it.
type runner Executor

// plan is what Resolve found for one call.
type plan struct {
	uid, gid uint32
	user     callUser
	mounts   []specs.Mount
}

func (r *runner) Profile() driver.Profile {
	return driver.Profile{
		Name:     Backend,
		Service:  r.opts.Service,
		Instance: r.instance,
		Reap:     "dsh-sandbox reap --backend docker",
	}
}

// Resolve checks the policy's image and runtime against the engine,
// resolves the call's user and mounts and reads the image's environment.
func (r *runner) Resolve(ctx context.Context, req *sandbox.Request) (driver.Resolution, *plan, error) {
	e := (*Executor)(r)
	if err := driver.ImportedImage(Backend, req.Policy.Image); err != nil {
		return driver.Resolution{}, nil, err
	}
	if req.Terminal == nil && e.stubErr != nil {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: %v", e.stubErr)
	}
	uid, gid, err := policy.ResolveUser(req.Policy, req.Session)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	user, err := e.remap.forCall(req.Policy, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	mounts, err := policy.Mounts(req.Policy, req.Session, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call not started: %w", context.Cause(ctx))
	}
	if err := e.checkRuntime(ctx, string(req.Policy.Runtime)); err != nil {
		return driver.Resolution{}, nil, err
	}
	imgEnv, err := e.imageEnv(ctx, req.Policy.Image)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	return driver.Resolution{
		ImageEnv: imgEnv,
		PathUID:  uid,
		Info: sandbox.Info{
			Backend: Backend,
			Runtime: string(req.Policy.Runtime),
			Image:   req.Policy.Image,
			Policy:  req.Policy.Name,
		},
	}, &plan{uid: uid, gid: gid, user: user, mounts: mounts}, nil
}

// Prepare stages the call's binds and creates its container, pushing the
// removal of each onto the call's cleanup stack. The container runs the
// stub, which Bind starts and binds the call to (stub.go), except on a
// terminal: there the call is baked in, and Bind starts it.
func (r *runner) Prepare(ctx context.Context, call *driver.Running, pl *plan) (driver.Slot, error) {
	e := (*Executor)(r)
	req, log, cu := call.Request, call.Log, call.Cleanup
	// The container and the staging mounts are made on a context the
	// caller's cancellation does not reach: they are removed on every
	// path.
	bg := context.WithoutCancel(ctx)
	name := containerName(call.ID)
	// Reap leaves the container and its staging mounts alone until Run
	// is done with them.
	if !e.active.Add(call.ID) {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: callId %q is already running on this executor", call.ID)
	}
	cu.Add("active call", func(context.Context) error {
		e.active.Remove(call.ID)
		return nil
	})
	usernsFD := -1
	if pl.user.idmapped {
		ns, err := e.usernsFile()
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: %w", call.ID, err)
		}
		usernsFD = int(ns.Fd())
	}
	binds, releaseBinds, err := e.stageBinds(call.ID, pl.mounts, usernsFD, e.sessionBind(req, pl))
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: %w", call.ID, err)
	}
	// Pushed before the container's removal, so it runs after it.
	cu.Add("staging mounts", func(context.Context) error { return releaseBinds() })
	cfg, hc, err := e.containerConfig(call.Call, req, pl.uid, pl.gid, pl.user, pl.mounts, binds)
	if err != nil {
		return nil, err
	}
	if req.Policy.Network == policy.NetworkAllowlist {
		eg, egErr := e.startEgress(log, req.Policy, call.Call, name, cfg, hc)
		if egErr != nil {
			return nil, egErr
		}
		// After the container's removal (egress.go).
		cu.Add("egress", func(context.Context) error {
			res, err := call.Result, error(nil)
			eg.end(&res, &err)
			if err != nil {
				call.Fail(err)
			}
			return nil
		})
	}
	var msg []byte
	if req.Terminal == nil {
		if msg, err = withStub(cfg, hc, e.stub, call.Timeout+e.opts.KillGrace+stubSlack); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: call %s: %v", call.ID, err)
		}
	}
	created, err := e.cli.ContainerCreate(bg, cfg, hc, nil, nil, name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			// The name belongs to another executor's call: not ours to
			// remove.
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: callId %q: a container named %q already exists in the engine: %w", call.ID, name, err)
		}
		// A create that failed may still have left the container.
		cu.Add("container", func(ctx context.Context) error { return e.remove(ctx, name) })
		return nil, e.callErr(bg, err, call.ID, "create container")
	}
	cu.Add("container", func(ctx context.Context) error { return e.remove(ctx, created.ID) })
	return &callContainer{e: e, call: call, id: created.ID, msg: msg}, nil
}

// remove deletes the container (forcibly: it may still run). What it
// cannot remove is left to Reap.
func (e *Executor) remove(ctx context.Context, id string) error {
	err := e.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("container %s: %w", id, err)
	}
	return nil
}

// containerName is the engine's name for a call's container.
func containerName(callID string) string { return "dsh-sandbox-" + callID }

// imageEnv returns the environment of the engine's image name.
func (e *Executor) imageEnv(ctx context.Context, name string) ([]string, error) {
	if _, err := driver.CanonicalRef(Backend, "policy.image", name); err != nil {
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
//   - the mounts ms of the call's plan (policy.Mounts) and their
//     staging mounts binds are the engine's as engineMounts maps them
//     (binds.go);
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
	l := policy.LimitsOrDefault(p.Limits)
	mem, cpus, pids := l.MemoryBytes, l.CPUs, l.Pids
	labels := reap.Labels(e.instance, call.ID, req.Session.ID, req.Labels)
	// When the engine stops the container itself (a daemon shutting
	// down, `docker stop`), it gives the same grace as a timeout does.
	stopTimeout := int((e.opts.KillGrace + time.Second - 1) / time.Second)
	cfg := &container.Config{
		Hostname:        policy.Hostname,
		User:            strconv.FormatUint(uint64(uid), 10) + ":" + strconv.FormatUint(uint64(gid), 10),
		Env:             call.Env,
		Cmd:             process.InitArgs(req, call.Env),
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
		ReadonlyRootfs: policy.ReadonlyRoot,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + user.seccomp},
		CgroupnsMode:   container.CgroupnsModePrivate,
		Runtime:        string(p.Runtime),
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
	tmpfs, mounts, err := engineMounts(call.ID, ms, binds)
	if err != nil {
		return nil, nil, err
	}
	hc.Tmpfs, hc.Mounts = tmpfs, mounts
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

// callContainer is a call's created container.
type callContainer struct {
	e    *Executor
	call *driver.Running
	id   string
	msg  []byte // the call message for the stub; nil on a terminal
}

func (c *callContainer) ID() string { return c.id }

// Bind attaches to the container and starts it: through the stub
// (bindStub), or, on a terminal, with the call baked in. It attaches
// before the start so that no output is lost, and waits for the next
// exit before the start so that the exit is not missed either.
func (c *callContainer) Bind(ctx context.Context, _ *driver.Running, stdio driver.Stdio) (driver.Process, error) {
	if c.msg != nil {
		return c.bindStub(ctx, stdio)
	}
	r, err := c.attachStart(ctx, stdio.Stdin != nil, func(out io.Reader) error {
		return copyOutput(stdio.Stdout, stdio.Stderr, out, stdio.Terminal != nil)
	})
	if err != nil {
		return nil, err
	}
	p := &engineProcess{c: c, running: r}
	if src := stdio.Stdin; src != nil {
		go func() {
			_, _ = io.Copy(r.hj.Conn, src) // fails once the attach is closed
			if stdio.Terminal == nil {
				// On a terminal the engine would close the terminal
				// itself: there, end of input is a key, ^D.
				_ = r.hj.CloseWrite()
			}
		}()
	}
	go c.e.followTerminal(r.bg, c.id, stdio.Terminal, r.exited)
	return p, nil
}

// running is a started container: its attach stream and its exit.
type running struct {
	bg       context.Context
	hj       types.HijackedResponse
	stopWait context.CancelFunc
	copied   chan error    // the output copy's end
	exited   chan struct{} // closed once status and waitErr are set
	status   int64
	waitErr  error
}

// attachStart attaches to the container (to its stdin too when stdin),
// copies its output with copyOut, waits for its next exit and starts
// it. It attaches before the start so that no output is lost, and waits
// for the next exit before the start so that the exit is not missed
// either.
func (c *callContainer) attachStart(ctx context.Context, stdin bool, copyOut func(io.Reader) error) (*running, error) {
	e, call, id := c.e, c.call, c.id
	bg := context.WithoutCancel(ctx)
	hj, err := e.cli.ContainerAttach(bg, id, container.AttachOptions{Stream: true, Stdin: stdin, Stdout: true, Stderr: true})
	if err != nil {
		return nil, e.callErr(bg, err, call.ID, "attach")
	}
	wctx, wcancel := context.WithCancel(bg)
	r := &running{bg: bg, hj: hj, stopWait: wcancel, copied: make(chan error, 1), exited: make(chan struct{})}
	waitC, waitErrC := e.cli.ContainerWait(wctx, id, container.WaitConditionNextExit)
	go func() { r.copied <- copyOut(hj.Reader) }()
	err = ctx.Err()
	if err != nil {
		err = sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s not started: %w", call.ID, context.Cause(ctx))
	} else if err = e.cli.ContainerStart(bg, id, container.StartOptions{}); err != nil {
		err = e.callErr(bg, err, call.ID, "start container")
	}
	if err != nil {
		wcancel()
		hj.Close()
		return nil, err
	}
	go func() {
		defer close(r.exited)
		select {
		case w := <-waitC:
			r.status = w.StatusCode
			if w.Error != nil && w.Error.Message != "" {
				r.waitErr = errors.New(w.Error.Message)
			}
		case err := <-waitErrC:
			r.waitErr = err
		}
	}()
	return r, nil
}

// engineProcess is a call's started container.
type engineProcess struct {
	c *callContainer
	*running
}

func (p *engineProcess) Done() <-chan struct{} { return p.exited }

func (p *engineProcess) Signal(_ context.Context, sig syscall.Signal) error {
	return p.c.e.signal(p.bg, p.c.id, sig)
}

// Wait lets the output stream trail the exit for outputDrain, then cuts
// it, and reads the status. An engine that shuts down kills its
// containers and reports their status as if the command had died of
// SIGKILL (or breaks the wait off): the outcome is then unknown,
// whatever status came. Only a suspicious end needs the probe (see
// suspicious).
func (p *engineProcess) Wait(context.Context, bool) (driver.Exit, error) {
	e, call, bg := p.c.e, p.c.call, p.bg
	defer p.stopWait()
	defer p.hj.Close()
	var copyErr error
	drain := time.NewTimer(outputDrain)
	select {
	case copyErr = <-p.copied:
	case <-drain.C:
		call.Log.Warn("output stream did not end after the container exited; closing it")
		p.hj.Close()
		<-p.copied
		copyErr = errors.New("the output stream did not end after the container exited")
	}
	drain.Stop()
	if suspicious(p.status, p.waitErr, copyErr) {
		if gone := e.engineGone(bg); gone != nil {
			call.Log.Debug("the engine went away during the call", "error", gone, "wait", p.waitErr, "output", copyErr, "status", p.status)
			return driver.Exit{}, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: the engine at %s went away during the call (an engine that stops kills its containers); the command's outcome is unknown: %w", call.ID, e.cli.DaemonHost(), gone)
		}
	}
	if p.waitErr != nil {
		return driver.Exit{}, unavailable(p.waitErr, "call %s: wait for the container", call.ID)
	}
	return driver.Exit{Status: int(p.status), Init: true, OOMKilled: e.oomKilled(bg, call.Log, p.c.id)}, nil
}

// oomKilled asks the engine whether the out-of-memory killer struck in
// the (exited, not yet removed) container: the engine records every OOM
// event of the container's cgroup, not only one that kills pid 1. An
// engine that cannot answer leaves it false, logged.
func (e *Executor) oomKilled(ctx context.Context, log *slog.Logger, id string) bool {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.cli.ContainerInspect(ictx, id)
	if err != nil || info.ContainerJSONBase == nil || info.State == nil {
		log.Warn("could not ask the engine whether the call ran out of memory", "error", err)
		return false
	}
	return info.State.OOMKilled
}

// suspicious reports whether a call's end may be the engine's doing
// rather than the command's: the wait failed, the output stream broke,
// or the status says pid 1 died of a signal or is one the engine made
// up (128 and above, or negative). An engine that stops sends the stop
// signal (SIGTERM) to pid 1 alone, which the init traps (process.InitArgs),
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
