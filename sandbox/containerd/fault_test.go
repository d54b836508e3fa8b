package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals"
)

// daemonWait bounds how long the fault tests wait for their daemon to
// stop or to answer again; it is a safety net, not an assertion on speed.
const daemonWait = 60 * time.Second

// privateDaemon is a containerd of the test's own, started with
// scripts/daemons.sh in a temporary directory.
type privateDaemon struct {
	script, dir, address string
}

// startPrivateDaemon starts a containerd of the test's own (skipping
// without root or containerd, failing under CI=true), stopped and
// removed when the test ends.
func startPrivateDaemon(t *testing.T) *privateDaemon {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = fmt.Sprintf("the containerd fault tests need root (running as uid %d)", os.Geteuid())
	} else if _, err := exec.LookPath("containerd"); err != nil {
		missing = "containerd is not installed (apt-get install containerd)"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s", missing)
		}
		t.Skip(missing)
	}
	// Not t.TempDir: the socket path (plus ".ttrpc") must stay short.
	dir, err := os.MkdirTemp("", "dshc-")
	if err != nil {
		t.Fatal(err)
	}
	d := &privateDaemon{script: fixtures.DaemonsScript(t), dir: dir, address: filepath.Join(dir, "containerd", "containerd.sock")}
	if n := len(d.address + ".ttrpc"); n >= 100 {
		os.RemoveAll(dir)
		t.Fatalf("socket path %q is %d bytes, want < 100", d.address, n)
	}
	t.Cleanup(func() {
		// Its exit status is not checked: daemons.sh stop fails when
		// no snapshot is mounted (its grep finds nothing under pipefail).
		if out, err := d.command("stop").CombinedOutput(); err != nil {
			t.Logf("daemons.sh stop containerd: %v\n%s", err, out)
		}
		if pid, err := os.ReadFile(filepath.Join(dir, "containerd.started")); err == nil {
			t.Errorf("daemons.sh stop containerd left its daemon (pid %s) recorded", strings.TrimSpace(string(pid)))
		}
		os.RemoveAll(dir)
	})
	d.start(t)
	return d
}

func (d *privateDaemon) command(verb string) *exec.Cmd {
	cmd := exec.Command("bash", d.script, verb, "containerd")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DSH_SANDBOX_DAEMONS_DIR=" + d.dir}
	return cmd
}

func (d *privateDaemon) start(t *testing.T) {
	t.Helper()
	if out, err := d.command("start").CombinedOutput(); err != nil {
		t.Fatalf("daemons.sh start containerd: %v\n%s", err, out)
	}
}

// pid returns the daemon's PID as daemons.sh recorded it.
func (d *privateDaemon) pid(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.dir, "containerd.started"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("containerd.started: %v", err)
	}
	return pid
}

// stop sends sig to the daemon and waits until it is gone (a zombie
// counts as gone).
func (d *privateDaemon) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	pid := d.pid(t)
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill(%d, %v) = %v", pid, sig, err)
	}
	for deadline := time.Now().Add(daemonWait); processAlive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("containerd (pid %d) did not exit within %v of %v", pid, daemonWait, sig)
		}
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// shims lists the PIDs of runc shims serving the daemon at address.
func shims(address string) []int {
	var out []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != shimBinary {
			continue
		}
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == address {
			out = append(out, pid)
		}
	}
	return out
}

// waitAnswers waits until e's client reaches the daemon again.
func waitAnswers(t *testing.T, e *Executor) {
	t.Helper()
	deadline := time.Now().Add(daemonWait)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := e.cli.Version(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted daemon does not answer the executor: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// daemonLeftovers lists what is left in the daemon of the test: every
// container, task and owner-labelled snapshot in the test namespace,
// every shim of the daemon, and the cgroup directories of instance.
func daemonLeftovers(t *testing.T, e *Executor, address, instance string) []string {
	t.Helper()
	var out []string
	ctx := namespaces.WithNamespace(t.Context(), testNamespace)
	cs, err := e.cli.Containers(ctx)
	if err != nil {
		out = append(out, "list containers: "+err.Error())
	}
	for _, c := range cs {
		out = append(out, "container "+c.ID())
	}
	ts, err := e.cli.TaskService().List(ctx, nil)
	if err != nil {
		out = append(out, "list tasks: "+err.Error())
	} else {
		for _, task := range ts.Tasks {
			out = append(out, "task "+task.ID)
		}
	}
	err = e.cli.SnapshotService(snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		out = append(out, "snapshot "+info.Name)
		return nil
	}, labelFilter(reap.LabelOwner, reap.LabelOwnerValue))
	if err != nil {
		out = append(out, "list snapshots: "+err.Error())
	}
	// A shim exits shortly after its task is deleted.
	for deadline := time.Now().Add(10 * time.Second); len(shims(address)) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range shims(address) {
		out = append(out, fmt.Sprintf("shim pid %d", pid))
	}
	for _, d := range cgroupDirs("/" + cgroupParent + "/" + instance) {
		out = append(out, "cgroup "+d)
	}
	return out
}

// TestRunDaemonStopsUnavailableCases stops the test's own containerd
// while a call runs `sleep 30` (SIGKILL: a crash; SIGTERM: an ordinary
// stop; the runc shim survives either and would keep the command
// running). The call must return within its timeout an error wrapping
// sandbox.ErrUnavailable (exit code 125) and no Result, with the command
// killed; a call while the daemon is down fails the same way, and so
// does New. After a restart, Reap (by the same executor after SIGKILL; by
// a fresh executor on the same state directory, once the first is
// closed, after SIGTERM) leaves no container, task, snapshot, shim or
// cgroup directory behind.
func TestRunDaemonStopsUnavailableCases(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(signals.Name(sig), func(t *testing.T) { testRunDaemonStops(t, sig) })
	}
}

func testRunDaemonStops(t *testing.T, sig syscall.Signal) {
	d := startPrivateDaemon(t)
	stateDir := testStateDir(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	e, err := New(t.Context(), Options{Address: d.address, Namespace: testNamespace, Service: driver.Service{StateDir: stateDir, Logger: logger}})
	if err != nil {
		t.Fatalf("New(private daemon) = %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	importTestImage(t, e)

	ws := t.TempDir()
	const timeout = 60 * time.Second
	req := &sandbox.Request{
		Command:   "echo started; sleep 30",
		TimeoutMs: timeout.Milliseconds(),
		Session:   sandbox.Session{Cwd: ws},
		Policy:    testPolicy(t),
		CallID:    "fault-" + reap.NewInstanceID(),
	}
	t0 := time.Now()
	done := sandboxtest.StartRun(context.Background(), t, e, req)
	cg := cgroupsPath(e.instance, req.CallID)
	if pids, _ := cgroupPIDs(cg); len(pids) == 0 {
		t.Fatalf("Run(%q) runs, but its cgroup %s has no process", req.Command, cg)
	}

	d.stop(t, sig)
	o := <-done
	elapsed := time.Since(t0)
	t.Logf("Run(%q) returned %v after the daemon got %v: %v", req.Command, elapsed.Round(time.Millisecond), sig, o.Err)
	if !errors.Is(o.Err, sandbox.ErrUnavailable) {
		t.Errorf("Run(%q) with the daemon stopped mid-call: err = %v, want one wrapping %v", req.Command, o.Err, sandbox.ErrUnavailable)
	}
	if o.Result != nil {
		t.Errorf("Run(%q) with the daemon stopped mid-call: res = %+v, want nil (the outcome is unknown)", req.Command, *o.Result)
	}
	if got := sandbox.ExitCode(o.Result, o.Err); got != 125 {
		t.Errorf("ExitCode(Run(%q) with the daemon stopped mid-call) = %d, want 125", req.Command, got)
	}
	if elapsed >= timeout {
		t.Errorf("Run(%q) with the daemon stopped mid-call returned after %v, want within its timeout %v", req.Command, elapsed, timeout)
	}
	if pids, err := cgroupPIDs(cg); len(pids) != 0 || err != nil {
		t.Errorf("processes of the call after Run(%q) returned = %v (%v), want none: the command must not outlive an unknown outcome", req.Command, pids, err)
	}

	down := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: ws}, Policy: testPolicy(t)}
	res, err := e.Run(context.Background(), down)
	if !errors.Is(err, sandbox.ErrUnavailable) || res != nil || sandbox.ExitCode(res, err) != 125 {
		t.Errorf("Run(%q) with the daemon down = %+v, %v; want nil, an error wrapping %v (exit 125)", down.Command, res, err, sandbox.ErrUnavailable)
	}
	if e2, err := New(t.Context(), Options{Address: d.address, Namespace: testNamespace, Service: driver.Service{StateDir: t.TempDir()}}); !errors.Is(err, sandbox.ErrUnavailable) {
		if e2 != nil {
			e2.Close()
		}
		t.Errorf("New() with the daemon down = %v, want an error wrapping %v", err, sandbox.ErrUnavailable)
	}

	d.start(t)
	waitAnswers(t, e)
	reaper := e
	if sig == syscall.SIGTERM {
		inst := e.instance
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		closed = true
		if reaper, err = New(t.Context(), Options{Address: d.address, Namespace: testNamespace, Service: driver.Service{StateDir: stateDir, Logger: logger}}); err != nil {
			t.Fatalf("New(same state directory) = %v", err)
		}
		defer reaper.Close()
		rep, err := reaper.Reap(t.Context())
		if err != nil {
			t.Errorf("Reap() by a fresh executor = %v", err)
		}
		if !slices.Contains(rep.Instances, inst) || !slices.Contains(rep.Containers, containerID(req.CallID)) {
			t.Errorf("Reap() by a fresh executor = %+v, want instance %s and container %s", rep, inst, containerID(req.CallID))
		}
		if left := daemonLeftovers(t, reaper, d.address, inst); len(left) != 0 {
			t.Errorf("after the restart and Reap: %q, want none", left)
		}
		if _, err := os.Stat(filepath.Join(stateDir, "containerd-instances", inst+".lock")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("lock file of the closed instance after Reap(): stat = %v, want not exist", err)
		}
	} else {
		rep, err := e.Reap(t.Context())
		if err != nil {
			t.Errorf("Reap() after the restart = %v", err)
		}
		if !slices.Contains(rep.Containers, containerID(req.CallID)) {
			t.Errorf("Reap() after the restart = %+v, want container %s", rep, containerID(req.CallID))
		}
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		closed = true
		if reaper, err = New(t.Context(), Options{Address: d.address, Namespace: testNamespace, Service: driver.Service{StateDir: stateDir, Logger: logger}}); err != nil {
			t.Fatalf("New(same state directory) = %v", err)
		}
		defer reaper.Close()
		if left := daemonLeftovers(t, reaper, d.address, e.instance); len(left) != 0 {
			t.Errorf("after the restart, Reap and Close: %q, want none", left)
		}
	}

	// The daemon serves calls again.
	res, err = reaper.Run(t.Context(), down)
	if err != nil || res == nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "ran\n" {
		t.Errorf("Run(%q) after the restart = %+v, %v; want exit 0 and %q", down.Command, res, err, "ran\n")
	}
}
