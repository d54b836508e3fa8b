package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// The engine cannot put a container into a network namespace of ours,
// so a call of network allowlist runs the other way round: its container
// gets the engine's network "none" (its own namespace, only lo), and its
// pid 1 first waits on a FIFO the service bind-mounts at readyPath. Once
// the container runs, the service serves the call's proxy, SOCKS5 and
// DNS servers inside that namespace (egress.Options.Namespace, opened
// through /proc/<pid>/ns/net of the container's pid 1, checked to be the
// process that holds the FIFO: see openNamespace) and writes a line to
// the FIFO; only then does the command start. If that fails, the FIFO
// is closed without a line, pid 1 exits 125 and Run returns the error.

// caPrefix starts the name of a call's CA bundle (egress.Bind) in its
// instance's directory, next to its FIFO: "ca-CALL.pem".
const caPrefix = "ca-"

// readyPath is where a call's container sees its FIFO.
const readyPath = "/dev/.dsh-sandbox-egress-ready"

// readyScript is the script of the /bin/sh that runs before the init:
// it waits for the line, then execs its arguments (the init's argv,
// which no shell parses).
const readyScript = `read -r _ <` + readyPath + ` || exit 125; exec "$@"`

// pidWait bounds how long the service waits for the engine to report
// the pid of a container whose process already opened its FIFO.
const pidWait = 10 * time.Second

// readyWait bounds how long the service waits for the container's pid 1
// to open its FIFO (the call's end stops the wait before), and
// readyPoll is how often it looks.
const (
	readyWait = 2 * time.Minute
	readyPoll = 2 * time.Millisecond
)

// callEgress is the egress network of one running call.
type callEgress struct {
	e       *Executor
	log     *slog.Logger
	name    string   // the container's name
	fifo    string   // the FIFO on the host
	ref     *os.File // the FIFO opened O_PATH: reopened by its descriptor, so that neither serve nor end depends on the path
	opts    egress.Options
	ended   atomic.Bool
	done    chan struct{}
	mu      sync.Mutex
	binding *egress.Binding // the call's credentials; nil without
	nc      *egress.Gateway // nil until served
	failed  error           // why the network could not be served
}

// startEgress prepares the egress network of a call of network
// allowlist whose container is to be created as name with cfg and hc:
// it points the call's env at the proxy, makes pid 1 wait for the
// network (readyScript), binds the FIFO and resolv.conf, and starts
// waiting for the container in the background. The caller must defer
// end once the container's removal is deferred too, so that end runs
// after it. On error nothing is left.
func (e *Executor) startEgress(log *slog.Logger, p sandbox.Policy, call *sandbox.Call, name string, cfg *container.Config, hc *container.HostConfig) (*callEgress, error) {
	if p.Runtime == runtimeRunsc {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: policy.network %q is not supported with runtime runsc yet (gVisor's network stack does not see the engine's namespace); use runc or crun", p.Network)
	}
	if _, err := egress.ParseRules(p.NetworkAllow, p.NetworkDeny); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: policy.network.%v", err)
	}
	files := filepath.Join(e.opts.StateDir, "egress")
	if err := egress.WriteFiles(files); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: %w", call.ID, err)
	}
	// One directory per instance, as for the staging mounts: instance
	// and call ids may both hold "-", so a shared directory could not
	// tell whose FIFO a name is. Only the service may enter it: another
	// host user who opened a call's FIFO could take its line (the
	// engine binds the FIFO in as root).
	dir := filepath.Join(files, e.instance)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: egress FIFO: %w", call.ID, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: egress FIFO: %w", call.ID, err)
	}
	fifo := filepath.Join(dir, "ready-"+call.ID)
	if err := os.Remove(fifo); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: egress FIFO: %w", call.ID, err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: egress FIFO: %w", call.ID, err)
	}
	// Readable by the call's user, whatever uid the engine maps it to;
	// writable by the service alone.
	if err := os.Chmod(fifo, 0o644); err != nil {
		os.Remove(fifo)
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: egress FIFO: %w", call.ID, err)
	}
	ref, err := os.OpenFile(fifo, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(fifo)
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: call %s: egress FIFO: %w", call.ID, err)
	}
	// The credentials, placeholders and CA are made now: the
	// container's environment and mounts are fixed at its creation,
	// before its network is served.
	binding, err := egress.Bind(p, e.opts.Getenv, dir, caPrefix+call.ID)
	if err != nil {
		ref.Close()
		os.Remove(fifo)
		return nil, err
	}
	call.Env = egress.WithProxyEnv(call.Env)
	hc.Mounts = append(hc.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: fifo, Target: readyPath, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: filepath.Join(files, egress.ResolvConfFile), Target: "/etc/resolv.conf", ReadOnly: true},
	)
	if binding != nil {
		call.Env = egress.WithEnv(call.Env, binding.Env)
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: binding.CABundle, Target: egress.CABundlePath, ReadOnly: true})
	}
	cfg.Env = call.Env
	cfg.Cmd = append([]string{"/bin/sh", "-c", readyScript, "sh"}, cfg.Cmd...)
	ce := &callEgress{
		e: e, log: log, name: name, fifo: fifo, ref: ref, done: make(chan struct{}), binding: binding,
		opts: egress.Options{Allow: p.NetworkAllow, Deny: p.NetworkDeny, Network: e.opts.Network, Logger: log, Binding: binding},
	}
	go ce.serve()
	return ce, nil
}

// serve waits until the container's pid 1 opens the FIFO, serves the
// call's network in the container's namespace and lets pid 1 go on.
func (ce *callEgress) serve() {
	defer close(ce.done)
	if ce.ended.Load() {
		return
	}
	w, err := ce.openWriter()
	if err != nil {
		ce.fail(err)
		return
	}
	if w == nil {
		return // the call ended first
	}
	defer w.Close() // without a line, pid 1 exits 125
	if ce.ended.Load() {
		return
	}
	pid, err := ce.containerPid()
	if err != nil {
		ce.fail(err)
		return
	}
	ns, err := ce.openNamespace(pid)
	if err != nil {
		ce.fail(err)
		return
	}
	opts := ce.opts
	opts.Namespace = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.Fd())
	nc, err := egress.Start(opts)
	ns.Close()
	if err != nil {
		ce.fail(err)
		return
	}
	ce.mu.Lock()
	ce.nc = nc
	ce.mu.Unlock()
	if _, err := w.Write([]byte("\n")); err != nil {
		ce.fail(fmt.Errorf("egress FIFO: %w", err))
	}
}

// openWriter opens the FIFO for writing once a reader, the container's
// pid 1, holds it open: an open without O_NONBLOCK would wait for one
// and could be ended only by opening the FIFO ourselves, so it polls
// every readyPoll. It returns nil, nil when the call ended first and an
// error after readyWait.
func (ce *callEgress) openWriter() (*os.File, error) {
	deadline := time.Now().Add(readyWait)
	for {
		w, err := os.OpenFile(ce.reopen(), os.O_WRONLY|unix.O_NONBLOCK, 0)
		switch {
		case err == nil:
			return w, nil
		case !errors.Is(err, unix.ENXIO): // ENXIO: no reader yet
			return nil, fmt.Errorf("egress FIFO: %w", err)
		case ce.ended.Load():
			return nil, nil
		case time.Now().After(deadline):
			return nil, fmt.Errorf("egress: container %s did not open its FIFO within %v", ce.name, readyWait)
		}
		time.Sleep(readyPoll)
	}
}

// containerPid asks the engine for the host pid of the container's
// pid 1, which already runs (it opened the FIFO) but may not be recorded
// by the engine yet.
func (ce *callEgress) containerPid() (int, error) {
	deadline := time.Now().Add(pidWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := ce.e.cli.ContainerInspect(ctx, ce.name)
		cancel()
		if err != nil {
			return 0, unavailable(err, "egress: inspect container %s", ce.name)
		}
		if info.State != nil && info.State.Running && info.State.Pid > 0 {
			return info.State.Pid, nil
		}
		if time.Now().After(deadline) || ce.ended.Load() {
			return 0, sandbox.Errorf(sandbox.ErrUnavailable, "docker: egress: the engine reported no pid for container %s within %v", ce.name, pidWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openNamespace opens the network namespace of pid, the container's
// pid 1 as the engine reported it, and makes sure it is that process:
// one that holds the call's FIFO open, or whose child does, and was alive from before the
// namespace was opened until after the check (a pid 1 killed meanwhile,
// by a timeout, and its pid reused by a host process, would otherwise
// put the proxy in that process's namespace).
func (ce *callEgress) openNamespace(pid int) (*os.File, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("egress: pid %d of container %s: %w", pid, ce.name, err)
	}
	defer unix.Close(pidfd)
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("egress: network namespace of container %s: %w", ce.name, err)
	}
	// pid 1's open of the FIFO returns after ours: its descriptor may
	// not be there yet.
	err = holdsFile(pid, ce.ref)
	for deadline := time.Now().Add(pidWait); err != nil && time.Now().Before(deadline) && !ce.ended.Load(); {
		time.Sleep(readyPoll)
		err = holdsFile(pid, ce.ref)
	}
	if err == nil {
		if serr := unix.PidfdSendSignal(pidfd, 0, nil, 0); serr != nil {
			err = fmt.Errorf("pid %d ended: %w", pid, serr)
		}
	}
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("egress: container %s: %w", ce.name, err)
	}
	return ns, nil
}

// holdsFile reports, as an error, that neither process pid nor a child
// of it has a descriptor open on the file f is. The container's pid 1
// is the stub (stub.go), which runs the ready script as its child.
func holdsFile(pid int, f *os.File) error {
	want, err := f.Stat()
	if err != nil {
		return err
	}
	for _, p := range append([]int{pid}, children(pid)...) {
		dir := fmt.Sprintf("/proc/%d/fd", p)
		fds, err := os.ReadDir(dir)
		if err != nil {
			if p == pid {
				return err
			}
			continue // the child ended
		}
		for _, fd := range fds {
			if fi, err := os.Stat(filepath.Join(dir, fd.Name())); err == nil && os.SameFile(fi, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("neither pid %d nor a child of it holds the call's FIFO open", pid)
}

// children lists the child processes of pid (those of each of its
// threads, /proc/PID/task/TID/children).
func children(pid int) []int {
	var out []int
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(w); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// reopen is the path that opens the call's FIFO through ref, whatever
// became of its name.
func (ce *callEgress) reopen() string {
	return fmt.Sprintf("/proc/self/fd/%d", ce.ref.Fd())
}

func (ce *callEgress) fail(err error) {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	if ce.failed == nil {
		ce.failed = err
	}
}

// end stops waiting for the container, closes the call's network (and
// every connection still open) and removes the FIFO. It puts the record
// into *res; when the network could not be served and Run had no error,
// Run's result becomes that error (the command never ran). Deferred so
// that it runs after the container's removal.
func (ce *callEgress) end(res **sandbox.Result, err *error) {
	ce.ended.Store(true)
	<-ce.done // serve sees ended within readyPoll, pidWait at most
	ce.ref.Close()
	if rmErr := os.Remove(ce.fifo); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		ce.log.Error("egress: removing the FIFO", "error", rmErr)
	}
	ce.mu.Lock()
	nc, failed := ce.nc, ce.failed
	ce.mu.Unlock()
	if nc != nil {
		recs := nc.Close()
		if *res != nil {
			(*res).Egress = recs
		}
	}
	if rmErr := ce.binding.Remove(); rmErr != nil {
		ce.log.Error("egress", "error", rmErr)
	}
	if failed != nil && *err == nil {
		*res, *err = nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: egress network of container %s: %w", ce.name, failed)
	}
}

// reapEgress removes the egress FIFOs and CA bundles of instance inst's
// calls for which keep is false (a crash between a call's start and its
// end leaves them behind) and returns their paths.
func (e *Executor) reapEgress(inst string, keep func(call string) bool) ([]string, error) {
	dir := filepath.Join(e.opts.StateDir, "egress", inst)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("egress FIFOs: %w", err)
	}
	var removed []string
	var errs []error
	for _, ent := range ents {
		call, ok := strings.CutPrefix(ent.Name(), "ready-")
		if !ok {
			call, ok = strings.CutPrefix(strings.TrimSuffix(ent.Name(), ".pem"), caPrefix)
		}
		if !ok || keep(call) {
			continue
		}
		p := filepath.Join(dir, ent.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("egress FIFO: %w", err))
			continue
		}
		removed = append(removed, p)
	}
	if inst != e.instance {
		_ = os.Remove(dir) // only when empty
	}
	return removed, errors.Join(errs...)
}
