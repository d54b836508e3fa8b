package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals"
)

// stopWait bounds how long the test waits for its engine to stop or to
// answer again; it is a safety net, not an assertion on speed.
const stopWait = 90 * time.Second

// privateEngine is a dockerd of the test's own with a containerd of its
// own (scripts/daemons.sh start-private): own sockets, data-root,
// exec-root and pidfile in a temporary directory. The fault tests stop
// and kill only this engine, never the one behind $DOCKER_HOST.
type privateEngine struct {
	script, dir, host string
	env               []string // extra environment of daemons.sh
}

// startPrivateEngine starts a private engine (skipping without root,
// dockerd or containerd, failing under CI=true), stopped and removed
// with its shims and mounts when the test ends. env is extra environment
// for daemons.sh (e.g. DSH_SANDBOX_DOCKER_USERNS_REMAP=none).
func startPrivateEngine(t *testing.T, env ...string) *privateEngine {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = fmt.Sprintf("the docker fault tests need root (running as uid %d)", os.Geteuid())
	}
	for _, bin := range []string{"dockerd", "containerd", "docker", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil && missing == "" {
			missing = bin + " is not installed (apt-get install docker.io containerd)"
		}
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s", missing)
		}
		t.Skip(missing)
	}
	// Not t.TempDir: the sockets below it must stay short.
	dir, err := os.MkdirTemp("", "dshd-")
	if err != nil {
		t.Fatal(err)
	}
	d := &privateEngine{script: fixtures.DaemonsScript(t), dir: dir, env: env}
	t.Cleanup(func() {
		pids := d.recordedPIDs()
		if out, err := d.command("stop-private").CombinedOutput(); err != nil {
			t.Errorf("daemons.sh stop-private: %v\n%s", err, out)
		}
		for name, pid := range pids {
			if processAlive(pid) {
				t.Errorf("daemons.sh stop-private left the private %s (pid %d) running", name, pid)
			}
		}
		if m := mountsBelow(dir); len(m) != 0 {
			t.Errorf("daemons.sh stop-private left mounts below %s: %q", dir, m)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	d.start(t)
	return d
}

func (d *privateEngine) command(verb string) *exec.Cmd {
	cmd := exec.Command("bash", d.script, verb)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "DSH_SANDBOX_DAEMONS_DIR=" + d.dir}, d.env...)
	return cmd
}

// start starts the private engine, or starts its dockerd again after
// stop (its containerd and data stay).
func (d *privateEngine) start(t *testing.T) {
	t.Helper()
	out, err := d.command("start-private").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("daemons.sh start-private: %v\n%s", err, stderr)
	}
	host, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "export DOCKER_HOST=")
	if !ok || !strings.HasPrefix(host, "unix://"+d.dir+"/") {
		t.Fatalf("daemons.sh start-private printed %q, want DOCKER_HOST on a socket below %s", out, d.dir)
	}
	d.host = host
}

// recordedPIDs returns the PIDs daemons.sh recorded for the private
// daemons, by name.
func (d *privateEngine) recordedPIDs() map[string]int {
	out := map[string]int{}
	for _, name := range []string{"dockerd", "containerd"} {
		data, err := os.ReadFile(filepath.Join(d.dir, name+".started"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			out[name] = pid
		}
	}
	return out
}

// stop sends sig to the private dockerd and waits until it is gone.
// SIGTERM is what `systemctl stop docker` sends: the engine stops its
// containers on the way down. SIGKILL is a crash: the containers outlive
// it.
func (d *privateEngine) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	pid, ok := d.recordedPIDs()["dockerd"]
	if !ok {
		t.Fatalf("daemons.sh recorded no private dockerd in %s", d.dir)
	}
	// The engine must be the one on the private socket, not another.
	if got := enginePID(t, d.host); got != pid {
		t.Fatalf("the process serving %s is pid %d, want the private dockerd %d", d.host, got, pid)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill(%d, %v) = %v", pid, sig, err)
	}
	for deadline := time.Now().Add(stopWait); processAlive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the private engine (pid %d) did not exit within %v of %v", pid, stopWait, sig)
		}
	}
}

// enginePID returns the PID of the process serving the engine's Unix
// socket host, from the socket's peer credentials.
func enginePID(t *testing.T, host string) int {
	t.Helper()
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Fatalf("engine at %q is not on a Unix socket", host)
	}
	d := socketPeer(path)
	if d.pid == 0 {
		t.Fatalf("no process serves %s", path)
	}
	return d.pid
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// mountsBelow lists the mount points below dir.
func mountsBelow(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"read mountinfo: " + err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// TestRunEngineStopsUnavailable stops an engine of the test's own while
// a call runs: the call must fail as unavailable (exit code 125), not
// report the SIGKILL the engine gave the container on its way down; a
// call while the engine is down fails the same way; once the engine is
// back, Reap leaves no container of the executor behind. The engine
// behind $DOCKER_HOST is never touched (TestMain checks it).
func TestRunEngineStopsUnavailable(t *testing.T) {
	d := startPrivateEngine(t)
	shared := sharedDaemons()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(signals.Name(sig), func(t *testing.T) { testRunEngineStops(t, d, sig) })
	}
	if diff := compareDaemons(shared, sharedDaemons()); diff != "" {
		t.Errorf("stopping the private engine changed a shared daemon: %s", diff)
	}
}

func testRunEngineStops(t *testing.T, d *privateEngine, sig syscall.Signal) {
	e, err := New(t.Context(), Options{Host: d.host, Service: driver.Service{StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))}})
	if err != nil {
		t.Fatalf("New(private engine) = %v", err)
	}
	defer e.Close()
	var tar bytes.Buffer
	if err := testRootfsTar(&tar); err != nil {
		t.Fatalf("the busybox test image: %v (install busybox-static and bash)", err)
	}
	if err := e.ImportRootfs(t.Context(), &tar, testImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) into the private engine = %v", testImage, err)
	}
	restarted := false
	defer func() {
		if !restarted {
			d.start(t)
		}
	}()

	ws := t.TempDir()
	req := &sandbox.Request{
		Command:   "echo started; sleep 300",
		TimeoutMs: 600_000,
		Session:   sandbox.Session{Cwd: ws},
		Policy:    testPolicy(t),
		CallID:    "fault-" + reap.NewInstanceID(),
	}
	req.Policy.Limits.MaxTimeoutMs = 600_000
	done := sandboxtest.StartRun(context.Background(), t, e, req)

	t0 := time.Now()
	d.stop(t, sig)
	o := <-done
	t.Logf("Run(%q) returned %v after %v: %v", req.Command, sig, time.Since(t0).Round(time.Millisecond), o.Err)
	if !errors.Is(o.Err, sandbox.ErrUnavailable) {
		t.Errorf("Run(%q) with the engine stopped mid-call: err = %v, want one wrapping %v", req.Command, o.Err, sandbox.ErrUnavailable)
	}
	if o.Result != nil {
		t.Errorf("Run(%q) with the engine stopped mid-call: res = %+v, want nil (the outcome is unknown)", req.Command, *o.Result)
	}
	if got := sandbox.ExitCode(o.Result, o.Err); got != 125 {
		t.Errorf("ExitCode(Run(%q) with the engine stopped mid-call) = %d, want 125", req.Command, got)
	}

	down := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: ws}, Policy: testPolicy(t)}
	res, err := e.Run(context.Background(), down)
	if !errors.Is(err, sandbox.ErrUnavailable) || res != nil {
		t.Errorf("Run(%q) with the engine down = %v, %v; want nil, an error wrapping %v", down.Command, res, err, sandbox.ErrUnavailable)
	}

	d.start(t)
	restarted = true
	rep, err := e.Reap(context.Background())
	if err != nil {
		t.Errorf("Reap() after the restart = %v", err)
	}
	t.Logf("Reap() after the restart removed %v", rep.Containers)
	if left := leftovers(t, e); len(left) != 0 {
		t.Errorf("after the restart and Reap: %v, want none", left)
	}
	if _, err := e.cli.ContainerInspect(context.Background(), containerName(req.CallID)); !isNotFound(err) {
		t.Errorf("ContainerInspect(%q) after Reap: err = %v, want not found", containerName(req.CallID), err)
	}

	// The executor serves calls again.
	res, err = e.Run(t.Context(), down)
	if err != nil || res == nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "ran\n" {
		t.Errorf("Run(%q) after the restart = %+v, %v; want exit 0 and %q", down.Command, res, err, "ran\n")
	}
}

// TestRunCallIDTakenByOtherExecutor runs a call whose id another
// executor's running call already uses: the engine refuses the container
// name, and the call must fail as invalid without removing the other
// call's container.
func TestRunCallIDTakenByOtherExecutor(t *testing.T) {
	first := newTestExecutor(t)
	second, err := New(t.Context(), Options{Service: driver.Service{StateDir: t.TempDir()}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer second.Close()

	ws := t.TempDir()
	req := &sandbox.Request{
		Command: "echo started; sleep 300",
		Session: sandbox.Session{Cwd: ws},
		Policy:  testPolicy(t),
		CallID:  "shared-" + reap.NewInstanceID(),
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := sandboxtest.StartRun(ctx, t, first, req)

	dup := &sandbox.Request{Command: "echo dup", Session: sandbox.Session{Cwd: ws}, Policy: testPolicy(t), CallID: req.CallID}
	res, err := second.Run(t.Context(), dup)
	if !errors.Is(err, sandbox.ErrInvalid) || res != nil {
		t.Errorf("Run(callId %q) on a second executor while the first runs it = %+v, %v; want nil, an error wrapping %v", dup.CallID, res, err, sandbox.ErrInvalid)
	}

	cancel()
	o := <-done
	if o.Err != nil || o.Result == nil || !o.Result.Aborted {
		t.Errorf("the first Run(%q) after cancel = %+v, %v; want an aborted result (its container untouched by the second executor)", req.Command, o.Result, o.Err)
	}
	if left := leftovers(t, first); len(left) != 0 {
		t.Errorf("after both calls: %v, want none", left)
	}
}

// TestDaemonsScriptLeavesRecycledPID gives scripts/daemons.sh stop a
// recorded dockerd PID that now belongs to another process (the daemon
// died and its PID was reused): the script must not signal that
// process, and forgets the record. (That it does stop a daemon it
// started is what TestRunEngineStopsUnavailable's cleanup checks.)
func TestDaemonsScriptLeavesRecycledPID(t *testing.T) {
	if os.Geteuid() != 0 {
		msg := "scripts/daemons.sh needs root"
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	}()
	d := &privateEngine{script: fixtures.DaemonsScript(t), dir: t.TempDir()}
	record := filepath.Join(d.dir, "dockerd.started")
	if err := os.WriteFile(record, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", d.script, "stop", "docker")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DSH_SANDBOX_DAEMONS_DIR=" + d.dir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("daemons.sh stop docker: %v\n%s", err, out)
	}
	if !processAlive(other.Process.Pid) {
		t.Errorf("daemons.sh stop docker signalled pid %d, which it did not start (output %q)", other.Process.Pid, out)
	}
	if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("daemons.sh stop docker kept the stale record %s: %v", record, err)
	}
}
