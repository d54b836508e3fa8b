package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/process"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Options configure an Executor. Service.StateDir is required; every
// other zero field means the documented default.
type Options struct {
	// Service is the state directory, logger, environment and kill
	// grace. The executor keeps bundles in StateDir/bundles/<container>,
	// the runtime's state root in StateDir/runtime/<runtime>, instance
	// locks in StateDir/instances, the host image's generated /etc in
	// StateDir/host and spill files of calls without a session directory
	// in StateDir/spill. Several executors (also of other runtimes and
	// other processes) may share it.
	driver.Service
	// Runtime is "runc" (the default when empty), "crun" or "runsc".
	Runtime string
	// RuntimePath is the runtime binary; empty means Runtime looked up
	// on PATH. A missing binary makes New fail with an error wrapping
	// sandbox.ErrUnavailable that names the runtime.
	RuntimePath string
	// Images is the local image store; nil means only the "host" image
	// is available.
	Images *images.Store
	// InstanceID names this executor in labels, cgroup paths and its
	// lock file; empty means a random "i-<hex>". It must be 1–64
	// characters of [A-Za-z0-9_.-] starting with a letter or digit, and
	// no other live executor on the same StateDir may use it.
	InstanceID string
	// Stub is the stub program (cmd/dsh-sandbox-stub), pid 1 of every
	// container of runc and crun; empty means dsh-sandbox-stub next to
	// the running executable, else on PATH (stub.Locate). Without it,
	// calls on runc and crun fail with sandbox.ErrUnavailable saying how
	// to install it.
	Stub string
	// Pool, when set, turns on the warm pool (runc and crun): a call that
	// starts has the slot of its session's next call prepared, a call
	// that finds one fitting exactly skips the container's start, and
	// calls are torn down after their result is returned. Nil means no
	// pool: every call prepares its own container and Run returns once
	// it is gone.
	Pool *pool.Options
	// Network is how the egress proxy of a call of network allowlist
	// resolves names and dials; the zero value is the host's resolver
	// and dialer. Tests point made-up names at local servers with it.
	Network egress.Network
}

// Executor runs each call in its own container of an OCI runtime (runc,
// crun or runsc) and removes every trace of it when the call ends. It
// holds an exclusive lock on StateDir/instances/<instance>.lock for its
// whole life, which is how Reap tells a live instance from a dead one.
//
// Create one with New; the zero value is not usable. An Executor is safe
// for concurrent use. Close releases it.
type Executor struct {
	opts     Options
	rt       *runtimeCLI
	instance string
	layout   cgroupLayout
	lock     *os.File
	stub     string // the stub program; stubErr says why there is none
	stubErr  error
	warm     *warm // nil without a pool

	gate driver.Gate // held by every running call; closed by Close

	// inject, when set by tests, is called at each named step of a call
	// and fails the call with its error.
	inject func(step string) error
}

var _ sandbox.Executor = (*Executor)(nil)

// New validates opts, finds the runtime binary, takes the instance lock
// and, for crun on a hybrid cgroup host, prepares the private mount
// namespace crun is started in. It must run as root.
func New(opts Options) (*Executor, error) {
	if opts.Runtime == "" {
		opts.Runtime = RuntimeRunc
	}
	path, err := lookRuntime(opts.Runtime, opts.RuntimePath)
	if err != nil {
		return nil, err
	}
	var stubPath string
	var stubErr error
	if usesStub(opts.Runtime) {
		stubPath, stubErr = stub.Locate(opts.Stub)
	}
	if opts.StateDir, opts.InstanceID, err = reap.CheckExecutorIdentity("oci", opts.StateDir, opts.InstanceID); err != nil {
		return nil, err
	}
	opts.Service = opts.Service.WithDefaults("backend", "oci", "runtime", opts.Runtime, "instance", opts.InstanceID)
	if os.Geteuid() != 0 {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: runtime %q needs root (running as uid %d)", opts.Runtime, os.Geteuid())
	}
	layout, err := readCgroupLayout()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: cgroups: %v", err)
	}
	e := &Executor{
		opts:     opts,
		stub:     stubPath,
		stubErr:  stubErr,
		instance: opts.InstanceID,
		layout:   layout,
		rt: &runtimeCLI{
			name: opts.Runtime,
			path: path,
			root: filepath.Join(opts.StateDir, "runtime", opts.Runtime),
		},
	}
	for _, d := range []string{opts.StateDir, e.rt.root, e.bundlesDir(), e.instancesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: state directory: %v", err)
		}
	}
	for _, d := range []string{opts.StateDir, e.bundlesDir()} {
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: state directory: %v", err)
		}
	}
	if e.lock, err = reap.LockInstance(e.instancesDir(), e.instance); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if opts.Runtime == RuntimeCrun {
		if hide := layout.unifiedMounts(); len(hide) > 0 {
			ns, err := newMountNamespace(hide)
			if err != nil {
				e.unlock(false)
				return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: crun on a hybrid cgroup host: %v", err)
			}
			e.rt.ns = ns
		}
	}
	if opts.Pool != nil && usesStub(opts.Runtime) {
		e.warm = e.newWarm(*opts.Pool)
	}
	return e, nil
}

func (e *Executor) bundlesDir() string   { return filepath.Join(e.opts.StateDir, "bundles") }
func (e *Executor) instancesDir() string { return filepath.Join(e.opts.StateDir, "instances") }

// Instance returns the executor's instance id.
func (e *Executor) Instance() string { return e.instance }

// Pooled reports whether the executor keeps a warm pool (Options.Pool
// with runc or crun).
func (e *Executor) Pooled() bool { return e.warm != nil }

// PoolSize is the size of the executor's warm pool; zero without one.
func (e *Executor) PoolSize() pool.Size {
	if e.warm == nil {
		return pool.Size{}
	}
	return e.warm.pool.Size()
}

// Runtime returns the runtime name ("runc", "crun" or "runsc").
func (e *Executor) Runtime() string { return e.rt.name }

// Close waits for running calls, then releases the instance lock, the
// crun mount namespace and the instance's (now empty) cgroup directories.
// Runs after Close fail with sandbox.ErrUnavailable. Close is idempotent.
func (e *Executor) Close() error { return e.gate.Close(e.release) }

// release is Close once the calls ended.
func (e *Executor) release() error {
	var perr error
	if e.warm != nil {
		// Ready slots and the teardowns of finished calls go first: they
		// need the runtime (and crun's mount namespace).
		ctx, cancel := context.WithTimeout(context.Background(), 2*driver.TeardownTimeout)
		perr = e.warm.pool.Close(ctx)
		cancel()
	}
	if e.rt.ns != nil {
		e.rt.ns.close()
	}
	leftover := false
	for _, d := range e.layout.dirsFor("/" + cgroupParent + "/" + e.instance) {
		// The instance's own directory only: the shared cgroupParent may
		// be empty for a moment while another instance creates its first
		// call's cgroup below it (Reap removes it when empty).
		removeEmptyParents(d, e.instance)
		if _, err := os.Stat(d); err == nil {
			leftover = true
		}
	}
	return errors.Join(perr, e.unlock(leftover))
}

// unlock releases the instance lock. With keepFile, the lock file stays
// so that a later Reap on this state directory knows the instance is dead
// and removes what it left (cgroups a failed teardown could not remove).
func (e *Executor) unlock(keepFile bool) error {
	if e.lock == nil {
		return nil
	}
	var err error
	if !keepFile {
		err = os.Remove(e.lock.Name())
	}
	if cerr := e.lock.Close(); err == nil {
		err = cerr
	}
	e.lock = nil
	return err
}

// step runs the test hook for the named step, when there is one.
func (e *Executor) step(name string) error {
	if e.inject == nil {
		return nil
	}
	if err := e.inject(name); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "oci: %s: %w", name, err)
	}
	return nil
}

// Run executes req in a new container and removes the container, its
// bundle, mounts and cgroups before returning, whatever happened
// (driver.Run).
func (e *Executor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return driver.RunGated(ctx, &e.gate, (*runner)(e), req)
}

// runner is the Executor as driver.Run sees it.
type runner Executor

// plan is what Resolve found for one call.
type plan struct {
	img  *images.Image
	bash string
	opts []policy.SpecOpt
	ids  idmap.IDs
	// poolKey and late are the call's pool key and whether its session
	// directory is mounted at Bind (Executor.poolKey), computed once.
	poolKey string
	late    bool
	// refill, once the call started, starts the prepare of its
	// session's next slot now if its delay has not yet passed
	// (pool.Pool.RefillLater).
	refill func()
}

func (r *runner) Profile() driver.Profile {
	return driver.Profile{
		Name:     "oci",
		Service:  r.opts.Service,
		Instance: r.instance,
	}
}

// Resolve checks the policy against the runtime, resolves the call's
// user, user namespace and image, and finds the image's shell.
func (r *runner) Resolve(ctx context.Context, req *sandbox.Request) (driver.Resolution, *plan, error) {
	e := (*Executor)(r)
	if err := e.checkPolicy(req.Policy); err != nil {
		return driver.Resolution{}, nil, err
	}
	if req.Terminal != nil && !terminalCapable(e.rt.name) {
		return driver.Resolution{}, nil, driver.NoTerminal("oci (" + e.rt.name + ")")
	}
	uid, gid, err := policy.ResolveUser(req.Policy, req.Session)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	img, err := e.image(req.Policy.Image, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	opts, err := policy.SpecOpts(req.Policy, req.Session, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	ids, err := e.userNamespace(req.Policy, uid, gid)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	if ids.Enabled {
		if err := idmap.Searchable(e.opts.StateDir); err != nil {
			return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: state directory: %v", err)
		}
		opts = append(opts, policy.WithUserNamespace(ids.Mapping))
		if ids.Idmapped {
			opts = append(opts, policy.WithoutSetidModes())
		}
	}
	bash, hasSh := findShell(imageRoot(img))
	if !hasSh {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrInvalid, "oci: policy.image %q has no /bin/sh", img.Name)
	}
	pl := &plan{img: img, bash: bash, opts: opts, ids: ids}
	pl.poolKey, pl.late = e.poolKey(req, uid, gid)
	imageName := req.Policy.Image // as the policy names it
	if imageName == "" {
		imageName = img.Name
	}
	return driver.Resolution{
		ImageEnv: img.Env,
		PathUID:  ids.DiskUID,
		Info: sandbox.Info{
			Backend:     "oci",
			Runtime:     e.rt.name,
			Image:       imageName,
			ImageDigest: img.Digest,
			Policy:      req.Policy.Name,
		},
	}, pl, nil
}

// Prepare starts the call's egress network when its policy asks for one,
// makes its bundle and, with runc and crun, starts the container with
// the stub waiting for the call, handing the undo of each to the call's
// cleanup stack.
func (r *runner) Prepare(ctx context.Context, call *driver.Running, pl *plan) (driver.Slot, error) {
	e := (*Executor)(r)
	opts := pl.opts
	if usesStub(e.rt.name) {
		if e.stubErr != nil {
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: %v", e.stubErr)
		}
		opts = append(opts[:len(opts):len(opts)], withStub(e.stub))
	}
	if call.Request.Policy.Network == policy.NetworkAllowlist {
		joinNet, err := e.startEgress(call.Request.Policy, pl.img.Host, call.Call, call.Log, call.Cleanup, call.Result)
		if err != nil {
			return nil, err
		}
		opts = append(opts[:len(opts):len(opts)], joinNet)
	}
	b, undo, err := e.createBundle(ctx, call.Call, call.Request, pl.img, pl.bash, opts, pl.ids)
	if err != nil {
		return nil, err
	}
	call.Cleanup.Merge(undo)
	s, err := e.newSlot(call, b, pl.bash)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: call %s: %w", call.ID, err)
	}
	if s.ctl != nil {
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// checkPolicy refuses policies meant for another backend or runtime.
func (e *Executor) checkPolicy(p sandbox.Policy) error {
	if p.Backend != sandbox.BackendOCI {
		return sandbox.Errorf(sandbox.ErrInvalid, "oci: policy.backend %q: this executor runs only \"oci\"", p.Backend)
	}
	if p.Runtime != "" && string(p.Runtime) != e.rt.name {
		return sandbox.Errorf(sandbox.ErrInvalid, "oci: policy.runtime %q: this executor runs %q", p.Runtime, e.rt.name)
	}
	if p.Network == policy.NetworkAllowlist && e.rt.name == RuntimeRunsc {
		return sandbox.Errorf(sandbox.ErrInvalid, "oci: policy.network %q is not supported with runtime runsc yet; use runc or crun", p.Network)
	}
	return nil
}

// image resolves the policy's image: "host" (or empty) is generated for
// uid:gid, anything else comes from the store.
func (e *Executor) image(name string, uid, gid uint32) (*images.Image, error) {
	if name == "" || name == images.HostName {
		img, err := images.Host(e.opts.StateDir, uid, gid)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: host image: %w", err)
		}
		return img, nil
	}
	if e.opts.Images == nil {
		return nil, sandbox.Errorf(sandbox.ErrNotFound, "oci: policy.image %q: no image store (only %q is available)", name, images.HostName)
	}
	img, err := e.opts.Images.Get(name)
	switch {
	case errors.Is(err, images.ErrNotFound):
		return nil, sandbox.Errorf(sandbox.ErrNotFound, "oci: policy.image %q: %w", name, err)
	case errors.Is(err, images.ErrInvalid):
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "oci: policy.image %q: %w", name, err)
	case err != nil:
		return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: policy.image %q: %w", name, err)
	}
	return img, nil
}

// imageRoot is where the image's files are seen from the host.
func imageRoot(img *images.Image) string {
	if img.Host {
		return "/"
	}
	return img.Rootfs
}

// createBundle makes the call's bundle: directory and marker, rootfs
// (host skeleton or overlay), transcript directory, config.json. Each
// finished step pushes its undo onto a cleanup stack; on failure (or a
// panic) createBundle undoes its own work before it returns, on success
// it hands the stack — whose last steps delete the container and its
// cgroups, then the bundle — to the caller.
func (e *Executor) createBundle(ctx context.Context, call *sandbox.Call, req *sandbox.Request, img *images.Image, bash string, opts []policy.SpecOpt, ids idmap.IDs) (_ *bundle, _ *driver.Cleanup, err error) {
	var cu driver.Cleanup
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.TeardownTimeout)
		defer cancel()
		if cerr := cu.Clean(tctx); cerr != nil {
			e.opts.Logger.Error("undoing a failed bundle left objects behind; `dsh-sandbox reap` removes them", "call", call.ID, "error", cerr)
		}
	}()
	b, err := e.buildBundle(ctx, &cu, call, req, img, bash, opts, ids)
	if err != nil {
		return nil, nil, err
	}
	return b, cu.Release(), nil
}

// buildBundle does the work of createBundle, pushing undo steps onto cu.
// The driver has checked the call's host paths (prepare.Paths)
// already.
func (e *Executor) buildBundle(ctx context.Context, cu *driver.Cleanup, call *sandbox.Call, req *sandbox.Request, img *images.Image, bash string, opts []policy.SpecOpt, ids idmap.IDs) (*bundle, error) {
	b, err := e.makeBundle(cu, call.ID, img)
	if err != nil {
		return nil, err
	}
	binds, err := e.makeRootfs(b, call.ID, img)
	if err != nil {
		return nil, err
	}
	spec, err := e.callSpec(call, req, bash, binds, opts)
	if err != nil {
		return nil, err
	}
	if usesStub(e.rt.name) {
		b.tasks = reserveStubTasks(spec)
	}
	oom, err := e.layout.prepareOOMAccounting(cgroupsPath(e.instance, call.ID), spec)
	if err != nil {
		return nil, internalError(call.ID, err)
	}
	b.oom = oom
	cu.Add("oom watch", func(context.Context) error { return oom.close() })
	if err := e.prepareMounts(b, spec, call.ID, req, img, ids); err != nil {
		return nil, err
	}
	if err := b.writeConfig(spec); err != nil {
		return nil, internalError(call.ID, err)
	}
	b.mounts = slices.Clone(spec.Mounts)
	b.hostUID, b.hostGID, b.hostIDsErr = idmap.CallHostIDs(spec)
	if ids.Enabled {
		b.rootUID, b.rootGID = ids.RootUID, ids.RootGID
	}
	if ctx.Err() != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: call %s not started: %w", call.ID, context.Cause(ctx))
	}
	return b, nil
}

// internalError is err of call id as an ErrInternal error.
func internalError(id string, err error) error {
	return sandbox.Errorf(sandbox.ErrInternal, "oci: call %s: %w", id, err)
}

// makeBundle makes the bundle directory of call id with its marker and
// pushes onto cu the removal of the bundle and, before it, of the
// container and its cgroups. When the container cannot be removed, the
// bundle stays.
func (e *Executor) makeBundle(cu *driver.Cleanup, id string, img *images.Image) (*bundle, error) {
	if err := e.step("bundle"); err != nil {
		return nil, err
	}
	m := marker{
		Instance:  e.instance,
		Runtime:   e.rt.name,
		Container: id,
		Cgroups:   e.layout.dirsFor(cgroupsPath(e.instance, id)),
		Overlay:   !img.Host,
	}
	b, err := createBundle(filepath.Join(e.bundlesDir(), id), m)
	// containerLeft is set when the container could not be removed: its
	// bundle (with the marker naming it) then stays, so that a later
	// Reap, and ReapDead's check, find the container through it.
	containerLeft := false
	if b != nil {
		b.ns = e.rt.ns
		cu.Add("bundle", func(context.Context) error {
			if containerLeft {
				return fmt.Errorf("bundle %s kept for reap: its container could not be removed", b.dir)
			}
			return b.remove()
		})
	}
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "oci: callId %q is already running", id)
		}
		return nil, internalError(id, err)
	}
	// The container and its cgroups go before the bundle does.
	cu.Add("container", func(ctx context.Context) error {
		rerr := e.rt.remove(ctx, id)
		containerLeft = rerr != nil
		return errors.Join(rerr, removeCgroupDirs(ctx, m.Cgroups))
	})
	return b, nil
}

// makeRootfs makes the root file system of call id's bundle from img:
// the skeleton of the host image, whose binds it returns, or an overlay
// of the image's rootfs.
func (e *Executor) makeRootfs(b *bundle, id string, img *images.Image) ([]specs.Mount, error) {
	if err := e.step("rootfs"); err != nil {
		return nil, err
	}
	if !img.Host {
		if err := b.overlayRootfs(img.Rootfs); err != nil {
			return nil, internalError(id, err)
		}
		return nil, nil
	}
	binds, err := b.hostRootfs(imageBinds(img), img.Symlinks)
	if err != nil {
		return nil, internalError(id, err)
	}
	return binds, nil
}

// imageBinds returns the binds of img as the bundle needs them.
func imageBinds(img *images.Image) []bindMount {
	bm := make([]bindMount, len(img.Binds))
	for i, bd := range img.Binds {
		bm[i] = bindMount{Source: bd.Source, Target: bd.Target}
	}
	return bm
}

// callSpec builds the call's runtime spec: the base spec with binds,
// the call's process, opts, then what every container of this executor
// gets.
func (e *Executor) callSpec(call *sandbox.Call, req *sandbox.Request, bash string, binds []specs.Mount, opts []policy.SpecOpt) (*specs.Spec, error) {
	if err := e.step("config"); err != nil {
		return nil, err
	}
	if e.rt.name == RuntimeRunsc {
		opts = append(opts[:len(opts):len(opts)], withRunscPids())
	}
	// With the stub (in opts), the process is the stub and only the
	// working directory here is the call's; runsc runs the call's init
	// and command.
	parts := policy.SpecParts{
		Root: bundleRootfs, Binds: binds,
		Args: process.InitArgsWithShell(bash, req, call.Env), Env: call.Env, Cwd: call.Workdir,
		Opts:        opts,
		Labels:      reap.Labels(e.instance, call.ID, req.Session.ID, req.Labels),
		CgroupsPath: containerCgroupsPath(e.instance, call.ID),
	}
	if req.Terminal != nil {
		parts.Terminal = &req.Terminal.Size
	}
	spec, err := policy.CallSpec(parts)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "oci: call %s: spec: %w", call.ID, err)
	}
	return spec, nil
}

// prepareMounts makes the bundle ready for the mounts of spec: every
// bind source becomes a staging mount in the bundle (the runtime must
// not follow a link swapped in since prepare.Paths), the rootfs is
// checked, and then made ready for the container's root
// (prepareMountPoints).
func (e *Executor) prepareMounts(b *bundle, spec *specs.Spec, id string, req *sandbox.Request, img *images.Image, ids idmap.IDs) error {
	if ids.Idmapped {
		if err := e.step("idmap"); err != nil {
			return err
		}
	}
	if err := e.step("binds"); err != nil {
		return err
	}
	if err := b.stageBinds(spec, idmap.StagingFor(req, ids)); err != nil {
		return internalError(id, err)
	}
	if err := b.checkRootfs(spec); err != nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "oci: call %s: image %s: %w", id, req.Policy.Image, err)
	}
	return e.prepareMountPoints(b, spec, id, img, ids)
}

// prepareMountPoints makes the mount points of spec in the bundle's
// rootfs, as root, for the host image and for any image in a user
// namespace; in a user namespace it also gives the rootfs to the
// container's root and, for runsc, prepares the gofer.
func (e *Executor) prepareMountPoints(b *bundle, spec *specs.Spec, id string, img *images.Image, ids idmap.IDs) error {
	if img.Host || ids.Enabled {
		// In a user namespace the runtime cannot create mount points
		// in an image it does not own: make them as root here.
		mounts := spec.Mounts
		if ids.Enabled && e.rt.name == RuntimeRunsc {
			mounts = goferMountPoints(spec)
		}
		if err := b.inNamespace(func() error { return b.mountPoints(mounts) }); err != nil {
			return internalError(id, err)
		}
	}
	if ids.Enabled {
		if err := b.ownRootfs(ids.RootUID, ids.RootGID, !img.Host); err != nil {
			return internalError(id, err)
		}
	}
	if ids.Enabled && e.rt.name == RuntimeRunsc {
		if err := e.step("gofer"); err != nil {
			return err
		}
		if err := b.prepareGofer(spec); err != nil {
			return internalError(id, err)
		}
	}
	return nil
}

// killAll signals every process of the container through the runtime.
// A SIGKILL is also sent straight to the container's first process (the
// pid the runtime wrote, when the runtime process is still its parent):
// its death ends the whole pid namespace without relying on the
// runtime's cgroup walk. When the runtime cannot signal the container
// and has not reported it started (no pid file yet), or the signal is
// SIGKILL, the runtime process itself is killed as well: nothing of the
// command can need a graceful stop then, the call ends at once, and
// teardown deletes whatever the runtime had begun to create.
func (e *Executor) killAll(ctx context.Context, id string, cmd *exec.Cmd, pidFile string, sig syscall.Signal) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := e.rt.kill(kctx, id, sig)
	_, serr := os.Stat(pidFile)
	started := serr == nil
	if sig == syscall.SIGKILL && started {
		killChild(pidFile, cmd.Process.Pid)
	}
	if err == nil || (started && sig != syscall.SIGKILL) {
		return err
	}
	if perr := cmd.Process.Signal(unix.SIGKILL); perr != nil && !errors.Is(perr, os.ErrProcessDone) {
		return errors.Join(err, perr)
	}
	return err
}

// killChild sends SIGKILL to the pid in pidFile if that process is still
// a child of parent (so that a recycled pid is never hit).
func killChild(pidFile string, parent int) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return
	}
	if ppid, ok := parentPid(pid); !ok || ppid != parent {
		return
	}
	_ = unix.Kill(pid, unix.SIGKILL)
}

// parentPid reads the parent pid of pid from /proc.
func parentPid(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold anything; the
	// fields after the last ')' are state, ppid, ….
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// runtimeFailure extracts the runtime's own error message: the last
// error entry of its log file, else the tail of what it wrote to stderr.
func runtimeFailure(logFile, stderr string) string {
	if msg := lastLogError(logFile); msg != "" {
		return msg
	}
	if len(stderr) > 2000 {
		stderr = stderr[len(stderr)-2000:]
	}
	if stderr == "" {
		return "no message"
	}
	return fmt.Sprintf("%q", stderr)
}
