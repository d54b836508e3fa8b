package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	cerrdefs "github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/cgroup"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/daemon"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/process"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Backend is the backend name in policies and results.
const Backend = "containerd"

// DefaultNamespace is the containerd namespace of an Executor whose
// Options.Namespace is empty.
const DefaultNamespace = "dsh-sandbox"

// runtimeName is the containerd runtime (shim) every task runs under.
const runtimeName = "io.containerd.runc.v2"

// snapshotter is the snapshotter images are unpacked into and call
// snapshots are made with.
const snapshotter = "overlayfs"

// Options configure an Executor. Address and Service.StateDir are
// required; every other zero field means the documented default.
type Options struct {
	// Service is the state directory, logger, environment and kill
	// grace. The task FIFOs go to StateDir/containerd-fifo, the instance
	// lock files to StateDir/containerd-instances, spill files of calls
	// without a session directory to StateDir/spill. Executors that share
	// a StateDir tell each other's leftovers apart by the lock files.
	driver.Service
	// Address is the daemon's socket path.
	Address string
	// Namespace is the containerd namespace of images, containers and
	// snapshots; empty means DefaultNamespace.
	Namespace string
	// InstanceID names this executor in labels; empty means a random
	// "i-<hex>". It must be 1–64 characters of [A-Za-z0-9_.-] starting
	// with a letter or digit.
	InstanceID string
	// Network is how the egress proxy of a call of network allowlist
	// resolves names and dials; the zero value is the host's resolver
	// and dialer. Tests point made-up names at local servers with it.
	Network egress.Network
	// Stub is the static stub program (cmd/dsh-sandbox-stub), pid 1 of
	// every container but one on a terminal (stub.go); empty means
	// dsh-sandbox-stub next to the running executable, else on PATH
	// (stub.Locate). Without it, those calls fail with
	// sandbox.ErrUnavailable saying how to install it.
	Stub string
}

// outputDrain bounds how long the output may trail the task's exit
// before the FIFOs are closed.
const outputDrain = 10 * time.Second

// Executor runs each call in a new containerd container and removes it
// when the call ends. It holds an exclusive lock on
// StateDir/containerd-instances/<instance>.lock for its whole life, which
// is how Reap tells a live instance from a dead one.
//
// Create one with New; the zero value is not usable. An Executor is safe
// for concurrent use. Close releases it.
type Executor struct {
	opts     Options
	cli      *containerd.Client
	instance string
	lock     *os.File

	// leftover is set when a teardown failed: Close then keeps the lock
	// file, so that a later Reap on the state directory finds the
	// instance dead and removes what it left.
	leftover atomic.Bool

	gate driver.Gate // held by every running call; closed by Close

	active reap.ActiveCalls // calls whose container Run still owns

	stub    string // the stub program's absolute path; "" when stubErr says why not
	stubErr error

	// foreignGrace is how long Reap leaves a stopped container of an
	// unknown instance alone: reap.ForeignLeftoverGrace (tests
	// shorten it).
	foreignGrace time.Duration
}

var _ sandbox.Executor = (*Executor)(nil)

// New validates opts, connects to the daemon at opts.Address and takes
// the instance lock. An unreachable daemon is an error wrapping
// sandbox.ErrUnavailable; an InstanceID a live executor on the same
// StateDir holds, one wrapping sandbox.ErrInvalid.
func New(ctx context.Context, opts Options) (*Executor, error) {
	var err error
	if opts.StateDir, opts.InstanceID, err = reap.CheckExecutorIdentity("containerd", opts.StateDir, opts.InstanceID); err != nil {
		return nil, err
	}
	if opts.Address == "" {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "containerd: Address is empty")
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if err := identifiers.Validate(opts.Namespace); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "containerd: Namespace %q: %v", opts.Namespace, err)
	}
	opts.Service = opts.Service.WithDefaults("backend", Backend, "instance", opts.InstanceID)
	// A missing socket or a dead daemon is answered at once; the client
	// would retry the dial until its timeout.
	if err := probe(ctx, opts.Address); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cli, err := containerd.New(opts.Address,
		containerd.WithDefaultNamespace(opts.Namespace),
		containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: daemon at %s is not reachable: %v", opts.Address, err)
	}
	if _, err := cli.Version(cctx); err != nil {
		_ = cli.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: daemon at %s is not reachable: %v", opts.Address, err)
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "containerd-fifo"), 0o700); err != nil {
		_ = cli.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: state directory: %v", err)
	}
	// The mapped root of a call's user namespace searches the state
	// directory to its rootfs (docs/identity.md).
	if err := os.MkdirAll(filepath.Join(opts.StateDir, idmapDir), 0o711); err != nil {
		_ = cli.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: state directory: %v", err)
	}
	for _, d := range []string{opts.StateDir, filepath.Join(opts.StateDir, idmapDir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			_ = cli.Close()
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: state directory: %v", err)
		}
	}
	e := &Executor{
		opts:     opts,
		cli:      cli,
		instance: opts.InstanceID,

		foreignGrace: reap.ForeignLeftoverGrace,
	}
	e.stub, e.stubErr = stub.Locate(opts.Stub)
	if e.lock, err = reap.LockInstance(e.instancesDir(), e.instance); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("containerd: %w", err)
	}
	return e, nil
}

// probe dials the daemon's socket once, so that a missing socket or a
// daemon that is not listening is an ErrUnavailable error at once.
func probe(ctx context.Context, address string) error {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "unix", address)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "containerd: daemon at %s is not reachable: %v", address, err)
	}
	return c.Close()
}

// instancesDir holds the lock files of the executors on StateDir.
func (e *Executor) instancesDir() string {
	return filepath.Join(e.opts.StateDir, "containerd-instances")
}

// Instance returns the executor's instance id.
func (e *Executor) Instance() string { return e.instance }

// Close waits for running calls, closes the daemon connection, removes
// the instance's (then empty) cgroup directories and releases the
// instance lock. When a teardown failed, or a cgroup directory of the
// instance remains, the lock file stays (unlocked), so that a later Reap
// on the same StateDir knows the instance is dead and removes what it
// left. Runs after Close fail with sandbox.ErrUnavailable. Close is
// idempotent.
func (e *Executor) Close() error { return e.gate.Close(e.release) }

// release is Close once the calls ended.
func (e *Executor) release() error {
	err := e.cli.Close()
	cgroupsGone := removeInstanceCgroups(e.instance)
	keep := e.leftover.Load() || !cgroupsGone
	if e.lock != nil {
		if !keep {
			err = errors.Join(err, os.Remove(e.lock.Name()))
		}
		err = errors.Join(err, e.lock.Close())
		e.lock = nil
	}
	return err
}

// ctx returns ctx in the executor's namespace.
func (e *Executor) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, e.opts.Namespace)
}

// classify maps a daemon error with the one classifier
// (daemon.Error): one that cannot be reached is ErrUnavailable, a
// missing object ErrNotFound, anything else ErrInternal.
func classify(err error, format string, args ...any) error {
	return daemon.Error(err, nil, "containerd: "+format, args...)
}

// containerID is the daemon's id for a call's container and snapshot.
func containerID(callID string) string { return "dsh-sandbox-" + callID }

// checkRuntime refuses every runtime but runc. crun cannot run under the
// runc shim on a hybrid cgroup host: the shim starts it in the daemon's
// mount namespace, where the cgroup2 mount is visible, and crun refuses
// that layout; the oci backend hides the mount, which a shim does not.
func checkRuntime(rt string) error {
	switch rt {
	case "", "runc":
		return nil
	case "crun":
		return sandbox.Errorf(sandbox.ErrInvalid, "containerd: policy.runtime %q: not supported by this backend: the runc shim starts crun in the daemon's mount namespace, where crun refuses a hybrid cgroup host; use runc, or the oci backend for crun", rt)
	}
	return sandbox.Errorf(sandbox.ErrInvalid, "containerd: policy.runtime %q: this backend runs only runc", rt)
}

// Run executes req in a new container and removes the task, container
// and snapshot before returning, whatever happened (driver.Run). A daemon
// that is down or goes away during the call gives no Result and an error
// wrapping sandbox.ErrUnavailable, and the call's processes are killed
// through its cgroup (the shim would keep them running). What teardown
// could not remove is left to Reap.
func (e *Executor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return driver.RunGated(ctx, &e.gate, (*runner)(e), req)
}

// runner is the Executor as driver.Run sees it.
type runner Executor

// plan is what Resolve found for one call.
type plan struct {
	opts []policy.SpecOpt
	ids  idmap.IDs
	img  containerd.Image
}

func (r *runner) Profile() driver.Profile {
	return driver.Profile{
		Name:     Backend,
		Service:  r.opts.Service,
		Instance: r.instance,
		Reap:     "dsh-sandbox reap --backend containerd",
	}
}

// Resolve checks the policy's image and runtime, resolves the call's
// user and user namespace and looks the image up in the daemon.
func (r *runner) Resolve(ctx context.Context, req *sandbox.Request) (driver.Resolution, *plan, error) {
	e := (*Executor)(r)
	if err := driver.ImportedImage(Backend, req.Policy.Image); err != nil {
		return driver.Resolution{}, nil, err
	}
	if err := checkRuntime(string(req.Policy.Runtime)); err != nil {
		return driver.Resolution{}, nil, err
	}
	if req.Terminal == nil && e.stubErr != nil {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: %v", e.stubErr)
	}
	uid, gid, err := policy.ResolveUser(req.Policy, req.Session)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	opts, err := policy.SpecOpts(req.Policy, req.Session, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	// Every call runs in a user namespace unless its policy says
	// user: host-root (docs/identity.md).
	ids, err := idmap.ForCall(Backend, req.Policy, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	if ids.Enabled {
		opts = append(opts, policy.WithUserNamespace(ids.Mapping))
		if ids.Idmapped {
			opts = append(opts, policy.WithoutSetidModes())
		}
	}
	if err := ctx.Err(); err != nil {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: call not started: %w", context.Cause(ctx))
	}
	// A daemon that is gone fails the call at once; the client would
	// wait for its socket until its dial timeout.
	if err := probe(ctx, e.opts.Address); err != nil {
		return driver.Resolution{}, nil, err
	}
	nctx := e.ctx(ctx)
	img, err := e.policyImage(nctx, req.Policy.Image)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	ispec, err := img.Spec(nctx)
	if err != nil {
		return driver.Resolution{}, nil, classify(err, "policy.image %q: config", req.Policy.Image)
	}
	return driver.Resolution{
		ImageEnv: ispec.Config.Env,
		PathUID:  ids.DiskUID,
		Info: sandbox.Info{
			Backend: Backend,
			Runtime: "runc",
			Image:   req.Policy.Image,
			Policy:  req.Policy.Name,
		},
	}, &plan{opts: opts, ids: ids, img: img}, nil
}

// Prepare builds the call's spec and creates its container and snapshot
// (and, in a user namespace, its id-mapped rootfs), pushing the removal
// of each onto the call's cleanup stack. The container runs the stub,
// which Bind starts and binds the call to (stub.go), except on a
// terminal: there the call is baked in, and Bind starts its task.
func (r *runner) Prepare(ctx context.Context, call *driver.Running, pl *plan) (driver.Slot, error) {
	e := (*Executor)(r)
	opts, err := e.joinEgress(call, pl.opts)
	if err != nil {
		return nil, err
	}
	spec, err := e.callSpec(call, opts)
	if err != nil {
		return nil, err
	}
	if !e.active.Add(call.ID) {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "containerd: callId %q is already running on this executor", call.ID)
	}
	call.Cleanup.Add("active call", func(context.Context) error {
		e.active.Remove(call.ID)
		return nil
	})
	callDir, err := e.stageCall(call, spec, pl.ids)
	if err != nil {
		return nil, err
	}
	// The stub and its lifeline are the service's own files, not staged:
	// no call can have swapped them.
	var msg []byte
	var lifeline *os.File
	if call.Request.Terminal == nil {
		if msg, lifeline, err = e.addStub(call, spec, callDir); err != nil {
			return nil, err
		}
	}
	// The daemon's objects are made on a context the caller's
	// cancellation does not reach: they are removed on every path.
	bg := context.WithoutCancel(e.ctx(ctx))
	c, err := e.createContainer(bg, call, pl, spec)
	if err != nil {
		return nil, err
	}
	ct := &callContainer{e: e, call: call, c: c, bg: bg, msg: msg, lifeline: lifeline}
	// The task, once Start created it; teardown then needs no lookup.
	call.Cleanup.Add("container", func(ctx context.Context) error {
		return e.markLeftover(e.remove(ctx, c, ct.task))
	})
	if pl.ids.Enabled {
		if err := e.mountCallRootfs(bg, call, spec, pl.ids, callDir); err != nil {
			return nil, err
		}
	}
	return ct, nil
}

// markLeftover marks the executor's state directory as holding
// leftovers when err, the error of a teardown step, is not nil, so that
// Close keeps the lock file. It returns err.
func (e *Executor) markLeftover(err error) error {
	if err != nil {
		e.leftover.Store(true)
	}
	return err
}

// callSpec builds the call's spec (policy.CallSpec) from the policy's
// options opts: its process, annotations, cgroup and terminal, on the
// rootfs.
func (e *Executor) callSpec(call *driver.Running, opts []policy.SpecOpt) (*specs.Spec, error) {
	req := call.Request
	parts := policy.SpecParts{
		Root: "rootfs",
		Args: process.InitArgs(req, call.Env), Env: call.Env, Cwd: call.Workdir,
		Opts:        opts,
		Labels:      call.Labels,
		CgroupsPath: cgroupsPath(e.instance, call.ID),
	}
	if req.Terminal != nil {
		parts.Terminal = &req.Terminal.Size
	}
	spec, err := policy.CallSpec(parts)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "containerd: call %s: spec: %w", call.ID, err)
	}
	return spec, nil
}

// stageCall makes the call's directory and stages every bind source of
// spec in it as a mount, pushing their removal onto the call's cleanup
// stack, and returns the directory. In a user namespace, spec's rootfs
// becomes the directory's, which mountCallRootfs mounts.
func (e *Executor) stageCall(call *driver.Running, spec *specs.Spec, ids idmap.IDs) (string, error) {
	if ids.Enabled {
		if err := idmap.Searchable(e.opts.StateDir); err != nil {
			return "", sandbox.Errorf(sandbox.ErrUnavailable, "containerd: state directory: %v", err)
		}
	}
	callDir, err := e.makeCallDir(call.ID)
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: %w", call.ID, err)
	}
	// Removed after the container (pushed before its removal).
	var staged []string
	call.Cleanup.Add("staging mounts", func(context.Context) error {
		_, err := idmap.RemoveCallDir(callDir, staged)
		return e.markLeftover(err)
	})
	// Every bind source becomes a staging mount: the shim's runc must
	// not follow a link swapped in since prepare.Paths.
	if staged, err = stageBinds(spec, idmap.StagingFor(call.Request, ids), callDir); err != nil {
		return "", sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: %w", call.ID, err)
	}
	if ids.Enabled {
		spec.Root.Path = rootfsDir(callDir)
	}
	return callDir, nil
}

// addStub makes the stub's lifeline in the call's directory, pushing its
// removal onto the call's cleanup stack, and makes the stub spec's
// process. It returns the call message for the stub and the executor's
// end of the lifeline.
func (e *Executor) addStub(call *driver.Running, spec *specs.Spec, callDir string) ([]byte, *os.File, error) {
	lifeline, err := makeLifeline(callDir)
	if err != nil {
		return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: %w", call.ID, err)
	}
	// Removed after the container, before the call's directory.
	call.Cleanup.Add("lifeline", func(context.Context) error {
		lifeline.Close()
		return e.markLeftover(os.Remove(lifeline.Name()))
	})
	msg, err := withStub(spec, e.stub, lifeline.Name(), call.Timeout+e.opts.KillGrace+stubSlack)
	if err != nil {
		return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "containerd: call %s: %v", call.ID, err)
	}
	return msg, lifeline, nil
}

// createContainer creates the call's container of spec and its snapshot
// of the plan's image on bg. When the create fails, it pushes the
// removal of a snapshot the create may have left onto the call's cleanup
// stack, unless the container or snapshot already existed (another
// call's).
func (e *Executor) createContainer(bg context.Context, call *driver.Running, pl *plan, spec *specs.Spec) (containerd.Container, error) {
	id := containerID(call.ID)
	snapLabels := call.Labels
	if pl.ids.Enabled {
		snapLabels = maps.Clone(call.Labels)
		snapLabels[gcRootLabel] = time.Now().UTC().Format(time.RFC3339)
	}
	copts := []containerd.NewContainerOpts{
		containerd.WithContainerLabels(call.Labels),
		containerd.WithImageName(pl.img.Name()), // images rm refuses an image in use
		containerd.WithSnapshotter(snapshotter),
		containerd.WithNewSnapshot(id, pl.img, snapshots.WithLabels(snapLabels)),
		containerd.WithRuntime(runtimeName, nil),
		containerd.WithSpec(spec),
	}
	if pl.ids.Enabled {
		copts = append(copts, withoutShimRootfs())
	}
	c, err := e.cli.NewContainer(bg, id, copts...)
	if err != nil {
		if cerrdefs.IsAlreadyExists(err) {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "containerd: callId %q: a container or snapshot %q already exists in namespace %q: %w", call.ID, id, e.opts.Namespace, err)
		}
		// A failed create may have left the snapshot behind.
		call.Cleanup.Add("snapshot", func(ctx context.Context) error {
			return e.markLeftover(e.removeSnapshot(ctx, id))
		})
		return nil, classify(err, "call %s: create container", call.ID)
	}
	return c, nil
}

// mountCallRootfs mounts the call's id-mapped rootfs in its directory,
// pushing its unmounting onto the call's cleanup stack.
func (e *Executor) mountCallRootfs(bg context.Context, call *driver.Running, spec *specs.Spec, ids idmap.IDs, callDir string) error {
	unmount, err := e.mountRootfs(bg, containerID(call.ID), callDir, spec, ids.RootUID, ids.RootGID)
	if errors.Is(err, sandbox.ErrInvalid) {
		return sandbox.Errorf(sandbox.ErrInvalid, "containerd: call %s: %w", call.ID, err)
	}
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "containerd: call %s: %w", call.ID, err)
	}
	// Detached before the task is deleted (the container keeps its
	// own mount) and so before its snapshot is removed.
	call.Cleanup.Add("rootfs", func(context.Context) error { return e.markLeftover(unmount()) })
	return nil
}

// remove deletes the call's task (killing what is left of it), container
// and snapshot. task is the call's task when it was created, else nil.
func (e *Executor) remove(ctx context.Context, c containerd.Container, task containerd.Task) error {
	if err := probe(ctx, e.opts.Address); err != nil {
		return fmt.Errorf("container %s: %w", c.ID(), err)
	}
	if err := e.deleteCall(ctx, c, task); err != nil {
		return fmt.Errorf("container %s: %w", c.ID(), err)
	}
	return nil
}

// deleteCall is deleteContainer for a call whose task, if created, is
// known: in the common case (the task has exited) it takes two requests
// fewer per object than the generic path, which it falls back to.
func (e *Executor) deleteCall(ctx context.Context, c containerd.Container, task containerd.Task) error {
	if task == nil {
		err := deleteContainer(ctx, c)
		// A user-namespaced call's snapshot is not in the container
		// record (withoutShimRootfs).
		if serr := e.cli.SnapshotService(snapshotter).Remove(ctx, c.ID()); serr != nil && !cerrdefs.IsNotFound(serr) {
			err = errors.Join(err, serr)
		}
		return err
	}
	_, err := task.Delete(ctx)
	if cerrdefs.IsFailedPrecondition(err) {
		// Still running (a call that failed after the start).
		_, err = task.Delete(ctx, containerd.WithProcessKill)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return errors.Join(err, deleteContainer(ctx, c))
	}
	err = e.cli.SnapshotService(snapshotter).Remove(ctx, c.ID())
	if err != nil && !cerrdefs.IsNotFound(err) {
		return errors.Join(err, deleteContainer(ctx, c))
	}
	if err := e.cli.ContainerService().Delete(ctx, c.ID()); err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// deleteContainer kills and deletes c's task if it has one, then deletes
// c with its snapshot. Objects already gone are not an error.
func deleteContainer(ctx context.Context, c containerd.Container) error {
	var errs []error
	if task, err := c.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	} else if !cerrdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeSnapshot deletes the snapshot key if it exists.
func (e *Executor) removeSnapshot(ctx context.Context, key string) error {
	err := probe(ctx, e.opts.Address)
	if err == nil {
		err = e.cli.SnapshotService(snapshotter).Remove(ctx, key)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("snapshot %s: %w", key, err)
	}
	return nil
}

// callContainer is a call's created container; task is set once Start
// created it.
type callContainer struct {
	e    *Executor
	call *driver.Running
	c    containerd.Container
	bg   context.Context // the namespace's context, detached
	task containerd.Task

	msg          []byte   // the call message for the stub; nil on a terminal
	lifeline     *os.File // the executor's end of the stub's lifeline; nil on a terminal
	lifelineOnce sync.Once
}

func (ct *callContainer) ID() string { return ct.c.ID() }

// Bind creates the task with its stdio attached and starts it, through
// the stub (startStub) or, on a terminal, with the call baked in. On
// failure the call's processes are killed through its cgroup: the
// outcome is unknown, and whatever the daemon can no longer stop must
// not keep running.
func (ct *callContainer) Bind(ctx context.Context, _ *driver.Running, stdio driver.Stdio) (driver.Process, error) {
	start := ct.start
	if ct.msg != nil {
		start = ct.startStub
	}
	p, err := start(ctx, stdio)
	if err != nil {
		ct.e.killCall(ct.call.Log, ct.call.ID)
	}
	return p, err
}

func (ct *callContainer) start(ctx context.Context, stdio driver.Stdio) (driver.Process, error) {
	call, bg := ct.call, ct.bg
	var stdin io.Reader
	stdinDone := make(chan struct{})
	if stdio.Stdin != nil {
		stdin = &eofReader{r: stdio.Stdin, eof: stdinDone}
	}
	task, exitC, err := ct.startTask(ctx, ioOpts(call.Request, cio.WithStreams(stdin, stdio.Stdout, stdio.Stderr))...)
	if err != nil {
		return nil, err
	}
	p := &callTask{ct: ct, t: task, finished: make(chan struct{}), done: make(chan struct{})}
	if stdin != nil && stdio.Terminal == nil {
		// The shim keeps the process's stdin open until told to close
		// it: the end of our copy alone is no EOF for the command. (On
		// a terminal it would close the terminal itself: there, end of
		// input is a key, ^D.)
		go func() {
			select {
			case <-stdinDone:
				_ = task.CloseIO(bg, containerd.WithStdinCloser)
			case <-p.finished:
			}
		}()
	}
	go func() {
		defer close(p.done)
		p.status = <-exitC
	}()
	go followTerminal(bg, task, stdio.Terminal, p.done)
	return p, nil
}

// startTask creates the call's task with the stdio of opts (its FIFOs
// in a directory of ours, explicitly: the client's default is under
// /run/containerd, which the daemon may not share), waits for its exit
// (before the start, so that the exit is not missed) and starts it.
func (ct *callContainer) startTask(ctx context.Context, opts ...cio.Opt) (containerd.Task, <-chan containerd.ExitStatus, error) {
	e, call, bg := ct.e, ct.call, ct.bg
	creator := cio.NewCreator(append(opts, cio.WithFIFODir(filepath.Join(e.opts.StateDir, "containerd-fifo")))...)
	task, err := ct.c.NewTask(bg, creator)
	if err != nil {
		return nil, nil, classify(err, "call %s: create task", call.ID)
	}
	ct.task = task
	exitC, err := task.Wait(bg)
	if err != nil {
		return nil, nil, classify(err, "call %s: wait for the task", call.ID)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: call %s not started: %w", call.ID, context.Cause(ctx))
	}
	if err := task.Start(bg); err != nil {
		return nil, nil, classify(err, "call %s: start task", call.ID)
	}
	return task, exitC, nil
}

// callTask is a call's started task.
type callTask struct {
	ct       *callContainer
	t        containerd.Task
	finished chan struct{} // closed by Wait
	done     chan struct{} // closed once status is set
	status   containerd.ExitStatus
}

func (p *callTask) Done() <-chan struct{} { return p.done }

// Signal sends sig to every process of the container, not only its
// init. A SIGKILL the daemon cannot deliver goes through the call's
// cgroup.
func (p *callTask) Signal(ctx context.Context, sig syscall.Signal) error {
	e, call := p.ct.e, p.ct.call
	kctx, cancel := context.WithTimeout(p.ct.bg, 10*time.Second)
	defer cancel()
	err := probe(kctx, e.opts.Address)
	if err == nil {
		err = p.t.Kill(kctx, sig, containerd.WithKillAll)
	}
	if err != nil {
		if sig == syscall.SIGKILL {
			e.killCall(call.Log, call.ID)
		}
		return err
	}
	return nil
}

// Wait lets the output trail the exit for outputDrain, then cuts it,
// and reads the status and the call's out-of-memory count (the task has
// exited but is not deleted: its cgroup still exists). A daemon gone
// during the call is an error: the outcome is unknown.
func (p *callTask) Wait(_ context.Context, _ bool) (driver.Exit, error) {
	defer close(p.finished)
	e, call := p.ct.e, p.ct.call
	p.drainOutput()
	code, _, werr := p.status.Result()
	if werr != nil {
		e.killCall(call.Log, call.ID)
		return driver.Exit{}, classify(werr, "call %s: wait for the task", call.ID)
	}
	return driver.Exit{
		Status:    int(code),
		Init:      true,
		OOMKilled: cgroup.OOMKilled(cgroupDirs(cgroupsPath(e.instance, call.ID))),
	}, nil
}

// drainOutput lets the output of the exited task trail its exit for
// outputDrain, then cuts it.
func (p *callTask) drainOutput() {
	e, call, task := p.ct.e, p.ct.call, p.t
	if p.status.Error() != nil {
		// The daemon is gone (the shim may not be): stop the command
		// before waiting for its output to end.
		e.killCall(call.Log, call.ID)
	}
	drained := make(chan struct{})
	go func() {
		task.IO().Wait()
		close(drained)
	}()
	drain := time.NewTimer(outputDrain)
	defer drain.Stop()
	select {
	case <-drained:
	case <-drain.C:
		call.Log.Warn("output did not end after the task exited; closing it")
		task.IO().Cancel()
		<-drained
	}
	task.IO().Close()
}

// killCall sends SIGKILL to every process left in the call's cgroup,
// which is how a command whose daemon went away is stopped: the runc shim
// survives the daemon and would keep it running. Processes found are
// logged.
func (e *Executor) killCall(log *slog.Logger, callID string) {
	n, err := killCgroup(cgroupsPath(e.instance, callID))
	if err != nil {
		log.Error("could not kill the call's processes", "error", err)
	}
	if n > 0 {
		log.Warn("killed the call's processes through its cgroup: the daemon could not", "processes", n)
	}
}

// eofReader reads r and closes eof once r reports the end of its data.
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (r *eofReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF {
		r.once.Do(func() { close(r.eof) })
	}
	return n, err
}
